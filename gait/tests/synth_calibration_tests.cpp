// The generator's calibration toward real CASIA-B (docs/gait-data.md, "Calibration"):
// each physical change does what it claims on a frame built by hand or by the walker,
// and the estimator's rates are the configured ones.
#include <gtest/gtest.h>

#include <cmath>

#include "gait/motion/mocap_folder.hpp"
#include "gait/synth/camera.hpp"
#include "gait/synth/generator.hpp"
#include "gait/synth/keypoints.hpp"
#include "gait/synth/raster.hpp"
#include "gait/synth/scene.hpp"
#include "gait/synth/seg_noise.hpp"
#include "gait/synth/walker.hpp"

namespace gait {
namespace {

const GaitModel& model() {
  static const MotionLibrary lib = build_motion_library(default_mocap_dir());
  return lib.model;
}

// A mid-stride pose of the mean walker, with a long padded coat (hem 0.4 thigh lengths
// below the knee) for CL.
struct Frame {
  BodyShape body;
  CanonPose pose;
};
Frame mid_stride() {
  Frame f;
  f.body.hip_half = 0.09, f.body.thigh = 0.42, f.body.shin = 0.40, f.body.ankle_height = 0.07;
  f.body.foot = 0.18, f.body.heel = 0.06, f.body.spine = 0.49, f.body.neck = 0.09;
  f.body.shoulder_half = 0.19, f.body.upper_arm = 0.32, f.body.forearm = 0.25, f.body.hand = 0.13;
  f.body.head_radius = 0.085;
  f.body.coat_bulk = 0.07;
  f.body.coat_length = 1.4;
  WalkStyle style;
  style.code = model().mean;
  f.pose = Walker(f.body, style).pose(0.3);
  return f;
}

// Per image row: the width of the body without the arms (pixels inside whose nearest
// surface is not an arm), in pixels: hands hanging beside the thighs would hide the
// legs' and the coat's own outline.
std::vector<int> row_widths(const SdfRaster& r) {
  std::vector<int> w(static_cast<std::size_t>(r.height()), 0);
  for (int y = 0; y < r.height(); ++y) {
    int x0 = r.width(), x1 = -1;
    for (int x = 0; x < r.width(); ++x)
      if (r.sdf(x, y) < 0 && r.part(x, y) != Part::Arm) x0 = std::min(x0, x), x1 = std::max(x1, x);
    w[static_cast<std::size_t>(y)] = x1 >= x0 ? x1 - x0 + 1 : 0;
  }
  return w;
}

TEST(SynthCalibration, ACoatWidensTheSilhouetteBelowTheHip) {
  const Frame f = mid_stride();
  for (int view : {0, 90}) {
    const Camera cam = make_camera(view);
    SdfRaster nm(320, 240), cl(320, 240);
    nm.draw(build_scene(f.pose, f.body, Condition::NM), cam);
    cl.draw(build_scene(f.pose, f.body, Condition::CL), cam);
    const auto wn = row_widths(nm), wc = row_widths(cl);
    // Rows from the hip joints down to the knees: every row wider in the coat, by at
    // least the coat's bulk on one side at that distance.
    const int y0 = static_cast<int>(std::max(cam.project(f.pose[cLHip]).y, cam.project(f.pose[cRHip]).y)) + 2;
    const int y1 = static_cast<int>(std::max(cam.project(f.pose[cLKnee]).y, cam.project(f.pose[cRKnee]).y));
    const double bulk_px = cam.focal * f.body.coat_bulk / cam.depth(f.pose[cPelvis]);
    ASSERT_GT(y1, y0 + 10) << "view " << view;
    for (int y = y0; y <= y1; ++y)
      EXPECT_GE(wc[static_cast<std::size_t>(y)], wn[static_cast<std::size_t>(y)] + static_cast<int>(bulk_px))
          << "view " << view << " row " << y;
  }
}

// The estimator with everything but the effect under test switched off.
EstimatorParams exact_estimator() {
  EstimatorParams p;
  p.jitter = p.drift = 0;
  p.miss_visible = p.miss_occluded = 0;
  p.swap_prob = p.cover_leg_swap = 0;
  return p;
}

TEST(SynthCalibration, JointsUnderACoatArePulledToItsOutline) {
  const Frame f = mid_stride();
  const Camera cam = make_camera(0);
  const CocoPoints pts = coco_points(f.pose, f.body);
  SdfRaster nm(320, 240), cl(320, 240);
  nm.draw(build_scene(f.pose, f.body, Condition::NM), cam);
  cl.draw(build_scene(f.pose, f.body, Condition::CL), cam);
  EstimatorParams p = exact_estimator();
  p.cover_pull = 1.0;
  PoseEstimatorSim plain(p, 1, 0), coat(p, 1, 0);
  const PoseFrame a = plain.observe(pts, cam, nm, 120), b = coat.observe(pts, cam, cl, 120);
  EXPECT_EQ(plain.counts().covered_joints, 0u);
  EXPECT_GE(coat.counts().covered_joints, 4u);  // both hips and both knees
  for (int j : {kLeftKnee, kRightKnee, kLeftHip, kRightHip}) {
    const Vec2 uv = cam.project(pts.pos[j]);
    EXPECT_NEAR(a[j].x, uv.x, 1e-3) << j;  // NM: where the joint is
    // CL with pull 1: on the coat's outline (within a pixel), away from the joint.
    const int x = static_cast<int>(std::floor(b[j].x)), y = static_cast<int>(std::floor(b[j].y));
    EXPECT_NEAR(cl.sdf(x, y), 0.0, 1.5) << j;
    EXPECT_GT(std::hypot(b[j].x - uv.x, b[j].y - uv.y), 3.0) << j;
  }
  // From the front the outline nearest to a hip is the coat's side: hips move apart.
  EXPECT_GT(std::abs(b[kLeftHip].x - b[kRightHip].x), std::abs(a[kLeftHip].x - a[kRightHip].x) + 6);
}

// Leg and arm swaps at the configured rates, counted on the output itself: with no
// jitter every frame is either the projection or the projection with a pair swapped.
TEST(SynthCalibration, SwapsHappenAtTheConfiguredRate) {
  const Frame f = mid_stride();
  const CocoPoints pts = coco_points(f.pose, f.body);
  struct Case {
    Condition cond;
    int view;
    double arms, legs;  // expected per-frame rates
  };
  EstimatorParams p = exact_estimator();
  p.cover_pull = 0;
  p.swap_prob = 0.02;
  p.cover_leg_swap = 0.1;
  // Side views triple the base rate; a knee under the coat adds cover_leg_swap to legs.
  for (const Case& c : {Case{Condition::NM, 0, 0.01, 0.01}, Case{Condition::NM, 90, 0.03, 0.03},
                        Case{Condition::CL, 0, 0.01, 0.11}}) {
    const Camera cam = make_camera(c.view);
    SdfRaster r(320, 240);
    r.draw(build_scene(f.pose, f.body, c.cond), cam);
    PoseEstimatorSim est(p, 7, c.view);
    const PoseFrame clean = PoseEstimatorSim(p, 7, c.view).observe(pts, cam, r, 120);
    constexpr int kFrames = 20000;
    int arms = 0, legs = 0;
    for (int i = 0; i < kFrames; ++i) {
      const PoseFrame o = est.observe(pts, cam, r, 120);
      arms += o[kLeftWrist].x == clean[kRightWrist].x && o[kLeftWrist].x != clean[kLeftWrist].x;
      legs += o[kLeftAnkle].x == clean[kRightAnkle].x && o[kLeftAnkle].x != clean[kLeftAnkle].x;
    }
    EXPECT_EQ(static_cast<std::size_t>(arms), est.counts().arm_swaps);
    EXPECT_EQ(static_cast<std::size_t>(legs), est.counts().leg_swaps);
    // Within 4 binomial standard deviations.
    for (auto [seen, rate] : {std::pair{arms, c.arms}, std::pair{legs, c.legs}})
      EXPECT_NEAR(seen, rate * kFrames, 4 * std::sqrt(rate * (1 - rate) * kFrames) + 1)
          << "cond " << static_cast<int>(c.cond) << " view " << c.view;
  }
}

// A garment that matches the background loses its pixels where the field says so, and
// only that garment's; without camouflage the same frame keeps them.
TEST(SynthCalibration, CamouflageRemovesOnlyTheMatchingGarment) {
  const Frame f = mid_stride();
  const Camera cam = make_camera(90);
  SdfRaster r(320, 240);
  r.draw(build_scene(f.pose, f.body, Condition::CL), cam);
  SegNoiseParams p;
  p.edge_amp = 0.5;
  p.hole_prob = p.speck_prob = p.failure_prob = 0;
  auto count = [&](Garment g, double level, std::array<int, 9>& per_part) {
    p.camo = g;
    p.camo_level = level;
    SegNoise noise(p, 3);
    common::Image img;
    noise.render(r, img);
    per_part.fill(0);
    for (int y = 0; y < r.height(); ++y)
      for (int x = 0; x < r.width(); ++x)
        if (img.at(y, x) && r.sdf(x, y) < -1) ++per_part[static_cast<std::size_t>(r.part(x, y))];
  };
  std::array<int, 9> none{}, all_top{}, all_trousers{}, some_top{};
  count(Garment::None, 0.4, none);
  count(Garment::Top, -1.0, all_top);  // every field value exceeds -1: the whole garment goes
  count(Garment::Trousers, -1.0, all_trousers);
  count(Garment::Top, 0.3, some_top);  // only where the wall behind matches best
  const auto leg = static_cast<std::size_t>(Part::Leg), head = static_cast<std::size_t>(Part::Head);
  for (Part part : {Part::Arm, Part::Coat}) {  // in CL the trunk is the coat
    const auto i = static_cast<std::size_t>(part);
    EXPECT_GT(none[i], 0) << i;
    EXPECT_EQ(all_top[i], 0) << i;
    EXPECT_EQ(all_trousers[i], none[i]) << i;
  }
  EXPECT_GT(none[leg], 0);
  EXPECT_EQ(all_trousers[leg], 0);
  EXPECT_EQ(all_top[leg], none[leg]);
  EXPECT_EQ(all_top[head], none[head]);
  const auto coat = static_cast<std::size_t>(Part::Coat);
  EXPECT_LT(some_top[coat], none[coat] * 95 / 100);
  EXPECT_GT(some_top[coat], none[coat] * 30 / 100);
}

// Between two walks a procedural person varies as much as a captured person does
// between clips: the spread of a subject's sequence codes along each principal
// direction is sd_within (times the clipped normal's sd).
TEST(SynthCalibration, SequencesOfAPersonVaryAsMuchAsACapturedPerson) {
  const GaitModel& m = model();
  Rng rng(11);
  const CycleCode id = m.sample_identity(rng);
  constexpr int kDraws = 3000;
  const double clipped_var = 0.7737;  // variance of N(0, 1) clipped (redrawn) to +-2
  for (std::size_t c = 0; c < 3; ++c) {
    double s2 = 0;
    for (int i = 0; i < kDraws; ++i) {
      const CycleCode v = m.vary_sequence(id, rng);
      double d = 0;
      for (int k = 0; k < kCodeSize; ++k) d += (v.v[k] - id.v[k]) * m.basis[c].v[k];
      s2 += d * d;
    }
    const double sd = std::sqrt(s2 / kDraws);
    EXPECT_NEAR(sd / (m.sd_within[c] * std::sqrt(clipped_var)), 1.0, 0.06) << "component " << c;
  }
}

// Carrying a bag, the trunk leans against the load: away from a bag in the right hand
// (the neck base moves left, -z, by about spine x sin(lean)), forward under a backpack;
// the legs do not change.
TEST(SynthCalibration, TheTrunkLeansAgainstTheBag) {
  const Frame f = mid_stride();
  WalkStyle nm;
  nm.code = model().mean;
  const double lean = 5.0, shift = f.body.spine * std::sin(lean * 3.14159265358979 / 180);
  BodyShape hand = f.body;
  hand.bag = BagStyle::Hand, hand.bag_side = 1, hand.bag_lean_deg = lean;
  WalkStyle bg = nm;
  carry_bag(hand, bg);
  EXPECT_TRUE(bg.straight_arm[1]);
  const CanonPose a = Walker(hand, nm).relative_pose(0.3), b = Walker(hand, bg).relative_pose(0.3);
  EXPECT_NEAR(b[cNeck].z - a[cNeck].z, -shift, 0.1 * shift);
  EXPECT_NEAR(b[cNeck].x, a[cNeck].x, 0.05 * shift);
  for (int j : {cLHip, cRHip, cLKnee, cRKnee, cLAnkle, cRAnkle}) EXPECT_NEAR(norm(b[j] - a[j]), 0.0, 1e-12) << j;

  BodyShape pack = f.body;
  pack.bag = BagStyle::Backpack, pack.bag_lean_deg = lean;
  WalkStyle bp = nm;
  carry_bag(pack, bp);
  const CanonPose c = Walker(pack, bp).relative_pose(0.3);
  EXPECT_NEAR(c[cNeck].x - a[cNeck].x, shift, 0.1 * shift);
  EXPECT_NEAR(c[cNeck].z, a[cNeck].z, 0.05 * shift);
}

}  // namespace
}  // namespace gait
