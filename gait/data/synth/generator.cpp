#include "gait/synth/generator.hpp"

#include <algorithm>
#include <cmath>

#include "common/check.hpp"
#include "gait/synth/keypoints.hpp"
#include "gait/synth/raster.hpp"
#include "gait/synth/scene.hpp"
#include "gait/synth/seg_noise.hpp"
#include "gait/synth/walker.hpp"

namespace gait {

std::string_view motion_source_name(MotionSource m) {
  switch (m) {
    case MotionSource::Cmu: return "cmu";
    case MotionSource::Procedural: return "procedural";
    case MotionSource::Mixed: return "mixed";
  }
  return "?";
}

namespace {
// Stream tags keep the random streams of different decisions independent.
enum : std::uint64_t { kBodyStream = 0xB0D1, kIdentityStream = 0x1DE7, kSequenceStream = 0x5E90, kViewStream = 0x71E3 };
constexpr int kMaxFrames = 1000;  // a walk never takes 40 s; guards against a stalled walker
constexpr double kBodyMarginM = 0.15;  // m around the joints for the quick visibility test
}  // namespace

void carry_bag(const BodyShape& body, WalkStyle& style) {
  const int side = body.bag_side > 0 ? 1 : 0;
  switch (body.bag) {
    case BagStyle::Hand:  // the carrying arm hangs straight and hardly swings
      style.arm_swing[side] = 0.25;
      style.straight_arm[side] = true;
      break;
    case BagStyle::Shoulder: style.arm_swing[side] = 0.6; break;  // the hand steadies the strap
    case BagStyle::Backpack: style.arm_swing = {0.85, 0.85}; break;
  }
  if (body.bag == BagStyle::Backpack) style.extra_lean_deg = body.bag_lean_deg;
  else style.side_lean_deg = -body.bag_side * body.bag_lean_deg;  // away from the load
}

Generator::Generator(const GeneratorOptions& opts, const GaitModel& model) : opts_(opts), model_(model) {
  XS_ASSERT(opts.subjects >= 1 && opts.subjects <= 999, "--subjects must be in 1..999 (got {})", opts.subjects);
  const auto persons = model.persons();
  XS_ASSERT(!persons.empty(), "the gait model has no captured persons");
  const int n = opts.subjects, p = static_cast<int>(persons.size());
  std::vector<std::string> motion(static_cast<std::size_t>(n), "procedural");
  if (opts.motion == MotionSource::Cmu) {
    for (int s = 0; s < n; ++s) motion[s] = persons[s % p];
  } else if (opts.motion == MotionSource::Mixed) {
    // Each captured person walks once, spread evenly over the subject ids (and so over
    // the train and test splits); everyone else is drawn from the model.
    for (int i = 0; i < std::min(n, p); ++i) motion[static_cast<std::size_t>(n >= p ? i * n / p : i)] = persons[i];
  }
  for (int s = 1; s <= n; ++s) {
    SubjectPlan plan;
    plan.subject = s;
    Rng body_rng(derive_seed({opts.seed, kBodyStream, static_cast<std::uint64_t>(s)}));
    plan.body = sample_body(body_rng);
    plan.motion = motion[s - 1];
    if (plan.motion == "procedural") {
      Rng id_rng(derive_seed({opts.seed, kIdentityStream, static_cast<std::uint64_t>(s)}));
      plan.identity = model.sample_identity(id_rng);
    }
    plans_.push_back(plan);
  }
}

void Generator::render(int subject, Condition cond, int seq, const std::function<void(ViewRender&&)>& sink) const {
  const SubjectPlan& plan = this->plan(subject);
  const BodyShape& body = plan.body;
  Rng rng(derive_seed({opts_.seed, kSequenceStream, static_cast<std::uint64_t>(subject),
                       static_cast<std::uint64_t>(cond), static_cast<std::uint64_t>(seq)}));
  WalkStyle style;
  if (plan.motion == "procedural") {
    style.code = model_.vary_sequence(plan.identity, rng);
  } else {
    const auto& cycles = model_.person_cycles.at(plan.motion);
    style.code = cycles[static_cast<std::size_t>(rng.below(static_cast<int>(cycles.size())))];
  }
  style.speed_factor = std::exp(rng.normal(0, kSpeedSpread));
  style.start_phase = rng.uniform();
  if (cond == Condition::BG) carry_bag(body, style);
  const Walker walker(body, style);
  const int lead = 3 + rng.below(13);  // video frames before the first one we keep
  // The walk, shared by every camera.
  std::vector<CanonPose> poses;
  const double x0 = walker.pose(0)[cPelvis].x;
  for (int i = 0; i < kMaxFrames; ++i) {
    CanonPose p = walker.pose(i / kVideoFps);
    const double shift = -opts_.path_half_length - x0;
    for (auto& j : p) j.x += shift;
    if (p[cPelvis].x > opts_.path_half_length) break;
    poses.push_back(p);
  }
  std::vector<Scene> scenes;
  std::vector<CocoPoints> coco;
  for (const auto& p : poses) {
    scenes.push_back(build_scene(p, body, cond));
    coco.push_back(coco_points(p, body));
  }
  thread_local SdfRaster raster(opts_.rig.width, opts_.rig.height_px);
  if (raster.width() != opts_.rig.width || raster.height() != opts_.rig.height_px)
    raster = SdfRaster(opts_.rig.width, opts_.rig.height_px);
  const int w = opts_.rig.width, h = opts_.rig.height_px;
  for (int view : opts_.views) {
    Rng vr(derive_seed({opts_.seed, kViewStream, static_cast<std::uint64_t>(subject), static_cast<std::uint64_t>(cond),
                        static_cast<std::uint64_t>(seq), static_cast<std::uint64_t>(view)}));
    const SegNoiseParams np = sample_seg_noise(vr, opts_.camo_prob);
    SegNoise noise(np, vr.next());
    PoseEstimatorSim estimator(opts_.estimator, vr.next(), view);
    const Camera cam = make_camera(view, opts_.rig);
    ViewRender out;
    out.key = {subject, cond, seq, view};
    for (std::size_t i = 0; i < poses.size(); ++i) {
      // Quick extent from the joints, before any rasterising.
      double bx0 = 1e9, bx1 = -1e9, by0 = 1e9, by1 = -1e9;
      bool in_front = true;
      for (const auto& j : poses[i]) {
        const double z = cam.depth(j);
        if (z < 0.5) in_front = false;
        const Vec2 uv = cam.project(j);
        const double m = cam.focal * kBodyMarginM / std::max(z, 0.5);
        bx0 = std::min(bx0, uv.x - m);
        bx1 = std::max(bx1, uv.x + m);
        by0 = std::min(by0, uv.y - m);
        by1 = std::max(by1, uv.y + m);
      }
      const double inside_w = std::min(bx1, static_cast<double>(w)) - std::max(bx0, 0.0);
      if (!in_front || by0 < 0 || by1 >= h || inside_w < 0.5 * (bx1 - bx0)) continue;
      Scene scene = scenes[i];
      add_shadow(scene, poses[i], np);
      raster.draw(scene, cam);
      common::Image img;
      noise.render(raster, img);
      const int frame_id = lead + static_cast<int>(i) + 1;
      const bool whole = raster.body_x0 >= 0 && raster.body_x1 < w && raster.body_y0 >= 0 && raster.body_y1 < h;
      if (whole && !vr.chance(kDetectorMiss)) {
        const PoseFrame f = estimator.observe(coco[i], cam, raster, raster.body_y1 - raster.body_y0);
        for (const Keypoint& k : f) {
          if (k.conf < kVisibleConf) continue;
          ++out.joints_checked;
          const int px = static_cast<int>(std::floor(k.x)), py = static_cast<int>(std::floor(k.y));
          if (px >= 0 && py >= 0 && px < w && py < h && img.at(py, px) != 0) ++out.joints_inside;
        }
        out.pose.frame_ids.push_back(frame_id);
        out.pose.frames.push_back(f);
      }
      out.sil_frames.push_back(frame_id);
      out.sil.push_back(std::move(img));
    }
    sink(std::move(out));
  }
}

}  // namespace gait
