// The generator: determinism, output-folder safety, conditions, and the round trip
// `gait synth --small` -> readers -> index with exact counts and skeletons that fall
// inside the silhouettes.
#include <gtest/gtest.h>

#include "gait/testing_tmp.hpp"

#include <array>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/check.hpp"
#include "common/files.hpp"
#include "gait/cache_build.hpp"
#include "gait/dataset.hpp"
#include "gait/motion/mocap_folder.hpp"
#include "gait/synth/keypoints.hpp"
#include "gait/synth/raster.hpp"
#include "gait/synth/scene.hpp"
#include "gait/synth/seg_noise.hpp"
#include "gait/strip.hpp"
#include "gait/synth/synth.hpp"
#include "gait/synth/walker.hpp"

namespace gait {
namespace {

namespace fs = std::filesystem;

const GaitModel& model() {
  static const MotionLibrary lib = build_motion_library(default_mocap_dir());
  return lib.model;
}

fs::path fresh_dir(const std::string& name) {
  const fs::path d = test_scratch_dir("gait_synth_test_" + name);
  fs::remove_all(d);
  return d;
}

std::vector<ViewRender> render_all(const Generator& g, int s, Condition c, int n) {
  std::vector<ViewRender> out;
  g.render(s, c, n, [&](ViewRender&& v) { out.push_back(std::move(v)); });
  return out;
}

TEST(Synth, SameSeedSameOutputDifferentSeedDifferent) {
  GeneratorOptions o;
  o.subjects = 3;
  o.views = {0, 90};
  const Generator a(o, model()), b(o, model());
  // BG and CL: bags and coats take the estimator's garment paths, every condition the
  // camouflage draw.
  for (Condition cond : {Condition::BG, Condition::CL}) {
    const auto va = render_all(a, 2, cond, 1), vb = render_all(b, 2, cond, 1);
    ASSERT_EQ(va.size(), 2u);
    for (std::size_t v = 0; v < va.size(); ++v) {
      EXPECT_EQ(va[v].sil_frames, vb[v].sil_frames);
      ASSERT_EQ(va[v].sil.size(), vb[v].sil.size());
      for (std::size_t f = 0; f < va[v].sil.size(); ++f) ASSERT_EQ(va[v].sil[f].pixels, vb[v].sil[f].pixels);
      EXPECT_EQ(pose_csv_text(va[v].key, va[v].pose), pose_csv_text(vb[v].key, vb[v].pose));
    }
  }
  const auto va = render_all(a, 2, Condition::BG, 1);
  o.seed = 2;
  const Generator c(o, model());
  const auto vc = render_all(c, 2, Condition::BG, 1);
  EXPECT_NE(pose_csv_text(vc[1].key, vc[1].pose), pose_csv_text(va[1].key, va[1].pose));
}

TEST(Synth, SubjectsDifferAndSequencesOfASubjectVary) {
  GeneratorOptions o;
  o.subjects = 4;
  o.motion = MotionSource::Procedural;
  const Generator g(o, model());
  EXPECT_NE(g.plan(1).body.height, g.plan(2).body.height);
  EXPECT_NE(g.plan(1).identity.v, g.plan(2).identity.v);
  GeneratorOptions m = o;
  m.motion = MotionSource::Mixed;
  m.subjects = 14;
  const Generator mixed(m, model());
  int cmu = 0;
  for (const auto& p : mixed.plans()) cmu += p.motion != "procedural";
  EXPECT_EQ(cmu, 7);  // each captured person once
}

double mean_area(const ViewRender& v) {
  double a = 0;
  for (const auto& img : v.sil)
    for (auto px : img.pixels) a += px != 0;
  return a / static_cast<double>(v.sil.size());
}

TEST(Synth, BagsAndCoatsEnlargeTheSilhouette) {
  GeneratorOptions o;
  o.subjects = 6;
  o.views = {90};
  o.camo_prob = 0;  // a garment lost to the background would shrink one sequence, not its clothing
  const Generator g(o, model());
  int bigger_bg = 0, bigger_cl = 0;
  for (int s = 1; s <= 6; ++s) {
    const double nm = mean_area(render_all(g, s, Condition::NM, 1)[0]);
    bigger_bg += mean_area(render_all(g, s, Condition::BG, 1)[0]) > nm * 1.03;
    bigger_cl += mean_area(render_all(g, s, Condition::CL, 1)[0]) > nm * 1.05;
  }
  EXPECT_GE(bigger_bg, 5);
  EXPECT_EQ(bigger_cl, 6);
}

// The coat's hem: along the thigh up to the knee, straight down from the knee beyond it;
// only CL has coat parts, and the skeleton is the same in every condition.
TEST(Synth, CoatHemFollowsTheThighThenHangsBelowTheKnee) {
  CanonPose p{};
  p[cPelvis] = {0, 0.95, 0};
  p[cLHip] = {-0.09, 0.92, 0};
  p[cRHip] = {0.09, 0.92, 0};
  p[cLKnee] = {-0.09, 0.50, 0.15};  // the left thigh swung forward
  p[cRKnee] = {0.09, 0.48, -0.05};
  p[cLAnkle] = {-0.09, 0.08, 0.10};
  p[cRAnkle] = {0.09, 0.08, -0.10};
  p[cNeck] = {0, 1.45, 0};
  p[cHead] = {0, 1.55, 0};
  p[cLShoulder] = {-0.19, 1.42, 0};
  p[cRShoulder] = {0.19, 1.42, 0};
  BodyShape b;
  auto hem_ends = [&](double length) {
    b.coat_length = length;
    std::vector<Vec3> ends;
    for (const Capsule& c : build_scene(p, b, Condition::CL).capsules)
      if (c.part == Part::Coat && c.a.x != 0 && c.b.y < c.a.y) ends.push_back(c.b);  // the two thigh panels
    return ends;
  };
  const auto half = hem_ends(0.5);
  ASSERT_EQ(half.size(), 2u);
  EXPECT_NEAR(half[0].y, 0.71, 1e-9);   // halfway down the left thigh
  EXPECT_NEAR(half[0].z, 0.075, 1e-9);
  const auto longc = hem_ends(1.4);
  ASSERT_EQ(longc.size(), 2u);
  const double thigh = norm(p[cLKnee] - p[cLHip]);
  EXPECT_NEAR(longc[0].y, 0.50 - 0.4 * thigh, 1e-9);  // 0.4 thigh lengths below the knee
  EXPECT_NEAR(longc[0].z, 0.15, 1e-9);
  EXPECT_LT(longc[1].y, p[cRKnee].y);
  for (Condition c : {Condition::NM, Condition::BG})
    for (const Capsule& cap : build_scene(p, b, c).capsules) EXPECT_NE(cap.part, Part::Coat);
}

TEST(Synth, RefusesANonEmptyOutputUnlessForced) {
  const fs::path out = fresh_dir("refuse");
  common::write_file_atomic(out / "keep.txt", "user data");
  SynthOptions o;
  o.out = out;
  o.gen.subjects = 1;
  o.gen.views = {90};
  o.gen.sequences = {{Condition::NM, 1}};
  o.progress = false;
  try {
    synthesize(o);
    FAIL() << "wrote into a non-empty folder";
  } catch (const common::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--force"), std::string::npos) << e.what();
  }
  o.force = true;
  EXPECT_EQ(synthesize(o).sequences, 1u);
  EXPECT_TRUE(fs::exists(out / "keep.txt"));  // --force replaces only the generator's own files
  fs::remove_all(out);
}

// A contact sheet of a generated subject: the grid is three conditions by the views,
// the walk one row of frames; each tile shows the silhouette (bright) with the skeleton
// in its limb colours over it.
TEST(Strip, RendersTheGridAndTheWalkFromTheFiles) {
  SynthOptions o;
  o.out = fresh_dir("strip");
  o.gen.subjects = 1;
  o.gen.views = {36, 90};
  o.gen.sequences = {{Condition::NM, 1}, {Condition::BG, 1}, {Condition::CL, 1}};
  o.progress = false;
  synthesize(o);
  const DatasetIndex idx = scan_dataset(resolve_dataset(o.out));
  StripSpec spec;
  spec.views = {36, 90};
  const common::Image grid = render_strip(idx, spec);
  EXPECT_EQ(grid.width, 2 * kStripTileW + 3 * kStripGap);
  EXPECT_EQ(grid.height, 3 * kStripTileH + 4 * kStripGap);
  auto count = [](const common::Image& img, std::array<std::uint8_t, 3> rgb) {
    std::size_t n = 0;
    for (int y = 0; y < img.height; ++y)
      for (int x = 0; x < img.width; ++x)
        n += img.at(y, x, 0) == rgb[0] && img.at(y, x, 1) == rgb[1] && img.at(y, x, 2) == rgb[2];
    return n;
  };
  EXPECT_GT(count(grid, {235, 235, 235}), 6u * 1000u);  // six silhouettes of ~125 px height
  EXPECT_GT(count(grid, {255, 140, 0}), 6u * 20u);      // left limbs
  EXPECT_GT(count(grid, {40, 120, 255}), 6u * 20u);     // right limbs
  spec.walk_view = 90;
  spec.count = 4;
  const common::Image walk = render_strip(idx, spec);
  EXPECT_EQ(walk.width, 4 * kStripTileW + 5 * kStripGap);
  EXPECT_EQ(walk.height, kStripTileH + 2 * kStripGap);
  spec.sequence = "xx-1";
  EXPECT_THROW(render_strip(idx, spec), common::Error);
  spec.sequence = "nm-02";  // not generated
  EXPECT_THROW(render_strip(idx, spec), common::Error);
  fs::remove_all(o.out);
}

TEST(Synth, ThreadCountDoesNotChangeTheFiles) {
  SynthOptions o;
  o.gen.subjects = 2;
  o.gen.views = {18, 162};
  o.gen.sequences = {{Condition::NM, 1}, {Condition::CL, 2}};
  o.progress = false;
  const fs::path one = fresh_dir("t1"), three = fresh_dir("t3");
  o.out = one;
  o.threads = 1;
  synthesize(o);
  o.out = three;
  o.threads = 3;
  synthesize(o);
  std::size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(one)) {
    if (!e.is_regular_file() || e.path().filename() == "synth.json") continue;
    const fs::path other = three / fs::relative(e.path(), one);
    ASSERT_TRUE(fs::exists(other)) << other;
    ASSERT_EQ(common::read_file(e.path()), common::read_file(other)) << other;
    ++files;
  }
  fs::remove_all(one);
  fs::remove_all(three);
  EXPECT_GT(files, 100u);
}

// The Must-show round trip on the --small preset.
TEST(SynthRoundTrip, SmallPresetReadsBackExactly) {
  SynthOptions o;
  o.out = fresh_dir("small");
  o.gen.subjects = kSmallSubjects;
  o.threads = 2;
  o.progress = false;
  const SynthReport rep = synthesize(o);
  EXPECT_EQ(rep.sequences, static_cast<std::size_t>(kSmallSubjects) * 110);

  const auto manifest = nlohmann::json::parse(common::read_file(o.out / "synth.json"));
  const DatasetIndex idx = scan_dataset(resolve_dataset(o.out));
  EXPECT_EQ(idx.report.sequences, static_cast<std::size_t>(kSmallSubjects) * 110);
  EXPECT_EQ(idx.report.with_both, idx.report.sequences);
  EXPECT_EQ(idx.report.pose.skipped_rows(), 0u);
  EXPECT_EQ(idx.report.ignored_names, 0u);
  std::map<std::tuple<int, Condition, int>, int> per_cell;  // sequences per subject/condition/view
  for (const auto& e : idx.entries) {
    ++per_cell[{e.key.subject, e.key.cond, e.key.view}];
    const auto& m = manifest["sequences"][sequence_id(e.key)];
    ASSERT_EQ(e.sil_frame_ids.size(), m[0].get<std::size_t>()) << sequence_id(e.key);
    ASSERT_EQ(e.pose_rows, m[1].get<std::size_t>()) << sequence_id(e.key);
    EXPECT_GE(e.aligned_frames, e.pose_rows * 9 / 10);
  }
  EXPECT_EQ(per_cell.size(), static_cast<std::size_t>(kSmallSubjects) * 3 * 11);
  for (const auto& [cell, n] : per_cell) EXPECT_EQ(n, sequences_per_condition(std::get<1>(cell)));

  // Skeletons and silhouettes of the same frame agree, read back from the files:
  // a visible joint (confidence >= kVisibleConf) falls on a foreground pixel. Not all
  // do: about 2 % land where a garment was lost to the background (camouflage) and
  // 1 % beyond a ragged edge; a misaligned frame or view would miss far more.
  std::size_t checked = 0, inside = 0;
  for (std::size_t i = 0; i < idx.entries.size(); i += 7) {
    const auto& e = idx.entries[i];
    const PoseSequence& pose = idx.poses.at(e.key);
    for (std::size_t r = 0; r < pose.frames.size(); r += 3) {
      const fs::path png = e.sil_dir / frame_file_name(e.key, pose.frame_ids[r]);
      if (!fs::exists(png)) continue;
      const common::Image img = common::read_png(png, 1);
      for (const Keypoint& k : pose.frames[r]) {
        if (k.conf < kVisibleConf) continue;
        ++checked;
        const int x = static_cast<int>(std::floor(k.x)), y = static_cast<int>(std::floor(k.y));
        inside += x >= 0 && y >= 0 && x < img.width && y < img.height && img.at(y, x) != 0;
      }
    }
  }
  ASSERT_GT(checked, 10000u);
  const double frac = static_cast<double>(inside) / static_cast<double>(checked);
  EXPECT_GE(frac, 0.93) << inside << " of " << checked;
  EXPECT_NEAR(frac, rep.joint_in_silhouette(), 0.01);

  // The cache of one subject: every sequence usable, frames aligned with pose.
  DatasetIndex one = idx;
  std::erase_if(one.entries, [](const IndexEntry& e) { return e.key.subject != 1; });
  CacheBuildOptions co;
  co.progress = false;
  const CacheBuildReport cr = build_cache(one, o.out / "cache", co);
  EXPECT_EQ(cr.written, 110u);
  std::vector<std::string> problems;
  const auto cached = scan_cache(o.out / "cache", problems);
  ASSERT_EQ(cached.size(), 110u);
  const CachedSequence s = read_cached_sequence(cached.front().path);
  EXPECT_EQ(s.pose.size(), s.sil.frames());
  EXPECT_GE(s.sil.frames(), 30u);
  fs::remove_all(o.out);
}

}  // namespace
}  // namespace gait
