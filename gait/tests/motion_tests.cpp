// Motion-capture readers (BVH, ASF/AMC), retargeting, cycle cutting, the gait model
// and the walker, on hand-made files with known answers and on the embedded captures.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "common/check.hpp"
#include "common/files.hpp"
#include "gait/motion/asf_amc.hpp"
#include "gait/motion/bvh.hpp"
#include "gait/motion/mocap_folder.hpp"
#include "gait/synth/walker.hpp"
#include "gait/testing_tmp.hpp"

namespace gait {
namespace {

namespace fs = std::filesystem;

const char* kTinyBvh = R"(HIERARCHY
ROOT hip
{
  OFFSET 0 0 0
  CHANNELS 6 Xposition Yposition Zposition Zrotation Yrotation Xrotation
  JOINT spine
  {
    OFFSET 0 10 0
    CHANNELS 3 Zrotation Xrotation Yrotation
    End Site
    {
      OFFSET 0 5 0
    }
  }
}
MOTION
Frames: 2
Frame Time: 0.0333333
1 2 3 0 0 0 0 0 0
1 2 3 90 0 0 0 0 0
)";

void expect_near(const Vec3& a, const Vec3& b) {
  EXPECT_NEAR(a.x, b.x, 1e-9);
  EXPECT_NEAR(a.y, b.y, 1e-9);
  EXPECT_NEAR(a.z, b.z, 1e-9);
}

TEST(Bvh, ForwardKinematicsKnownPositions) {
  const BvhFile b = parse_bvh(kTinyBvh, "tiny.bvh");
  ASSERT_EQ(b.joints.size(), 3u);
  EXPECT_EQ(b.channels, 9);
  const MotionClip c = bvh_to_clip(b, "tiny", "p");
  EXPECT_NEAR(c.fps, 30.0, 1e-3);
  expect_near(c.frames[0][1], {1, 12, 3});
  expect_near(c.frames[0][2], {1, 17, 3});
  // Root Zrotation 90: +Y turns into -X.
  expect_near(c.frames[1][1], {-9, 2, 3});
  expect_near(c.frames[1][2], {-14, 2, 3});
  EXPECT_EQ(c.joint("SPINE"), 1);
  EXPECT_EQ(c.joint("spine_end"), 2);
}

void expect_error(const std::string& text, const std::string& needle) {
  try {
    parse_bvh(text, "bad.bvh");
    FAIL() << "accepted: " << needle;
  } catch (const common::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("bad.bvh"), std::string::npos) << m;
    EXPECT_NE(m.find(needle), std::string::npos) << m;
  }
}

TEST(Bvh, MalformedFilesNameTheFileAndLine) {
  std::string t = kTinyBvh;
  expect_error(t.substr(0, t.size() - 20), "truncated");
  std::string bad = t;
  bad.replace(bad.find("Xrotation\n"), 9, "Wrotation");
  expect_error(bad, "unknown channel");
  bad = t;
  bad.replace(bad.rfind("90"), 2, "x9");
  expect_error(bad, "bad.bvh:20: 'x9' is not a number");
  expect_error("HIERARCHY\nROOT a\n{\n", "unexpected end of file");
}

TEST(Bvh, WriteThenReadIsTheSameMotion) {
  const BvhFile b = parse_bvh(kTinyBvh, "tiny.bvh");
  const BvhFile again = parse_bvh(write_bvh(b, 2, 2), "again.bvh");
  ASSERT_EQ(again.frames.size(), 2u);
  EXPECT_EQ(again.frames[1], b.frames[1]);
}

// hip (6 channels) -> spine (3) -> lThumb1 (3) -> lThumb2 (3) -> End Site, and
// hip -> lfoot (3) -> End Site: 18 channels, frame f's channel c holds 100 f + c.
std::string finger_bvh(int frames) {
  std::string t = R"(HIERARCHY
ROOT hip
{
  OFFSET 0 0 0
  CHANNELS 6 Xposition Yposition Zposition Zrotation Yrotation Xrotation
  JOINT spine
  {
    OFFSET 0 10 0
    CHANNELS 3 Zrotation Xrotation Yrotation
    JOINT lThumb1
    {
      OFFSET 1 2 3
      CHANNELS 3 Zrotation Xrotation Yrotation
      JOINT lThumb2
      {
        OFFSET 0 1 0
        CHANNELS 3 Zrotation Xrotation Yrotation
        End Site
        {
          OFFSET 0 1 0
        }
      }
    }
  }
  JOINT lfoot
  {
    OFFSET 0 -9 0
    CHANNELS 3 Zrotation Xrotation Yrotation
    End Site
    {
      OFFSET 0 0 4
    }
  }
}
MOTION
)";
  t += "Frames: " + std::to_string(frames) + "\nFrame Time: 0.01\n";
  for (int f = 0; f < frames; ++f) {
    for (int c = 0; c < 18; ++c) t += std::to_string(100 * f + c) + (c == 17 ? "\n" : " ");
  }
  return t;
}

TEST(Bvh, TrimKeepsWhatTheRetargetingReadsAndEveryStepthFrame) {
  const BvhFile in = parse_bvh(finger_bvh(5), "fingers.bvh");
  const BvhFile t = trim_bvh(in, 2);
  std::vector<std::string> names;
  std::vector<int> parents;
  for (const auto& j : t.joints) {
    names.push_back(j.name);
    parents.push_back(j.parent);
  }
  // The thumb goes; spine ends in an End Site at the thumb's offset (its bone keeps its length).
  EXPECT_EQ(names, (std::vector<std::string>{"hip", "spine", "spine_end", "lfoot", "lfoot_end"}));
  EXPECT_EQ(parents, (std::vector<int>{-1, 0, 1, 0, 3}));
  EXPECT_TRUE(t.joints[2].end_site);
  expect_near(t.joints[2].offset, {1, 2, 3});
  expect_near(t.joints[4].offset, {0, 0, 4});
  EXPECT_EQ(t.channels, 12);
  EXPECT_EQ(t.joints[3].first_channel, 9);
  EXPECT_NEAR(t.frame_time, 0.02, 1e-12);
  ASSERT_EQ(t.frames.size(), 3u);  // source frames 0, 2, 4
  std::vector<double> want;
  for (int c : {0, 1, 2, 3, 4, 5, 6, 7, 8, 15, 16, 17}) want.push_back(400 + c);
  EXPECT_EQ(t.frames[2], want);
  // What it writes reads back as the same hierarchy and motion.
  const BvhFile again = parse_bvh(write_bvh(t, 1, 2), "trimmed.bvh");
  ASSERT_EQ(again.joints.size(), t.joints.size());
  for (std::size_t j = 0; j < t.joints.size(); ++j) {
    EXPECT_EQ(again.joints[j].name, t.joints[j].name);
    EXPECT_EQ(again.joints[j].parent, t.joints[j].parent);
  }
  EXPECT_EQ(again.frames, t.frames);
  EXPECT_EQ(trim_bvh(in, 1).frames.size(), 5u);
  EXPECT_THROW(trim_bvh(in, 0), common::Error);
}

const char* kTinyAsf = R"(:version 1.10
:name tiny
:units
  mass 1.0
  length 0.45
  angle deg
:documentation
  anything at all
:root
   order TX TY TZ RX RY RZ
   axis XYZ
   position 0 0 0
   orientation 0 0 0
:bonedata
  begin
     id 1
     name up
     direction 0 1 0
     length 2
     axis 0 0 0  XYZ
    dof rx
    limits (-180.0 180.0)
  end
:hierarchy
  begin
    root up
  end
)";

TEST(AsfAmc, ForwardKinematicsAndUnits) {
  const AsfSkeleton asf = parse_asf(kTinyAsf, "tiny.asf");
  EXPECT_NEAR(asf.metres_per_unit(), 0.056444, 1e-6);  // CMU's "length 0.45"
  const AmcFile amc = parse_amc(":FULLY-SPECIFIED\n:DEGREES\n1\nroot 1 2 3 0 0 0\nup 0\n2\nroot 1 2 3 0 0 0\nup 90\n", "t.amc");
  const MotionClip c = amc_to_clip(asf, amc, 120, "t", "p");
  ASSERT_EQ(c.frames.size(), 2u);
  expect_near(c.frames[0][1], {1, 4, 3});
  expect_near(c.frames[1][1], {1, 2, 5});  // Rx(90): +Y -> +Z
  EXPECT_THROW(parse_amc("1\nroot 1 2 3 0 0 0\n3\n", "skip.amc"), common::Error);  // frame 3 after 1
  EXPECT_THROW(parse_asf(":bonedata\n begin\n name x\n bogus 1\n end\n", "b.asf"), common::Error);
}

class EmbeddedMocap : public ::testing::Test {
 protected:
  static const MotionLibrary& lib() {
    static const MotionLibrary l = build_motion_library(default_mocap_dir());
    return l;
  }
};

TEST_F(EmbeddedMocap, AllClipsAndPeopleLoad) {
  std::vector<std::string> problems;
  const auto clips = load_mocap_folder(default_mocap_dir(), problems);
  EXPECT_TRUE(problems.empty()) << problems.front();
  EXPECT_EQ(clips.size(), 37u);
  std::set<std::string> people;
  for (const auto& c : clips) {
    people.insert(c.person);
    EXPECT_NEAR(c.fps, 40.0, 0.01) << c.name;
    EXPECT_EQ(c.first_frame_is_rest_pose, c.format == "bvh") << c.name;  // cgspeed's T-pose
    // Property: forward kinematics keeps every bone's length over time.
    for (std::size_t j = 1; j < c.joint_names.size(); ++j) {
      const int p = c.parents[j];
      const double l0 = norm(c.frames[0][j] - c.frames[0][p]);
      for (std::size_t f = 1; f < c.frames.size(); f += 17) EXPECT_NEAR(norm(c.frames[f][j] - c.frames[f][p]), l0, 1e-6 * (1 + l0));
    }
  }
  EXPECT_EQ(people.size(), 7u);
}

TEST_F(EmbeddedMocap, CyclesAreHumanWalking) {
  EXPECT_EQ(lib().cycles_per_person.size(), 7u);
  EXPECT_GE(lib().cycles, 50u);
  for (const auto& [person, codes] : lib().model.person_cycles)
    for (const auto& c : codes) {
      EXPECT_GT(c.duration_s(), 0.8) << person;
      EXPECT_LT(c.duration_s(), 1.7) << person;
    }
  EXPECT_LT(lib().fourier_rms, 0.03);  // six harmonics keep the curves
  EXPECT_GT(lib().model.explained, 0.8);
}

TEST_F(EmbeddedMocap, WalkersMoveLikePeople) {
  Rng rng(3);
  const BodyShape body = sample_body(rng);
  std::vector<CycleCode> codes;
  for (const auto& [p, c] : lib().model.person_cycles) codes.push_back(c.front());
  for (int i = 0; i < 5; ++i) codes.push_back(lib().model.sample_identity(rng));
  for (const auto& code : codes) {
    WalkStyle st;
    st.code = code;
    const Walker w(body, st);
    EXPECT_GT(w.speed(), 0.6);  // human walking: about 0.8 - 1.6 m/s
    EXPECT_LT(w.speed(), 1.9);
    for (double t = 0; t < 2.0; t += 0.1) {
      const CanonPose p = w.pose(t);
      const double sole = std::min({p[cLAnkle].y - body.ankle_height, p[cRAnkle].y - body.ankle_height,
                                    p[cLToe].y - 0.02, p[cRToe].y - 0.02});
      EXPECT_NEAR(sole, 0.0, 1e-9);                  // grounded
      EXPECT_GT(p[cHead].y, 0.75 * body.height);    // upright
      EXPECT_NEAR(norm(p[cLKnee] - p[cLHip]), body.thigh, 1e-9);
    }
  }
}

TEST_F(EmbeddedMocap, ModelSamplingIsDeterministic) {
  Rng a(11), b(11);
  const CycleCode x = lib().model.sample_identity(a), y = lib().model.sample_identity(b);
  EXPECT_EQ(x.v, y.v);
  const PhasePose p = evaluate_code(x, 0.3);
  for (const auto& d : p.dirs) EXPECT_NEAR(norm(d), 1.0, 1e-12);
}

TEST_F(EmbeddedMocap, TheSpreadLeavesOutClipsWalkedAtAnInstructedPace) {
  // 07_04, 07_05, 08_04 (slow walk), 08_05 (walk/stride), 08_11 (slow walk/stride).
  EXPECT_GT(lib().cycles_instructed, 0u);
  std::size_t natural = 0;
  for (const auto& [p, c] : lib().model.person_cycles) natural += c.size();
  EXPECT_EQ(natural, lib().cycles - lib().cycles_instructed);
}

TEST(GaitModel, InstructedPaceLabels) {
  for (const char* d : {"slow walk", "walk/stride", "slow walk/stride", "Fast Walk", "brisk walk"})
    EXPECT_TRUE(instructed_pace(d)) << d;
  for (const char* d : {"walk", "NormalWalk", "WalkStraight", "WalkForward", ""}) EXPECT_FALSE(instructed_pace(d)) << d;
}

// Two people whose natural walks lie +-1 from their own mean along one direction (the
// people 5 apart along another), and one slow walk of person a far out along the first:
// the walk-to-walk spread is that of the natural walks alone (total variance 1 over the
// plane), the slow walk still moves the mean, and only natural walks are kept per person.
TEST(GaitModel, WalkToWalkSpreadComesFromNaturalPaceCycles) {
  auto code = [](double a, double b) {
    CycleCode c;
    c.v[0] = a;
    c.v[1] = b;
    return c;
  };
  const std::vector<CycleCode> codes = {code(1, 0), code(-1, 0), code(1, 5), code(-1, 5), code(9, 0)};
  const std::vector<std::string> persons = {"a", "a", "b", "b", "a"};
  auto within = [](const GaitModel& m) {
    double v = 0;
    for (double s : m.sd_within) v += s * s;
    return v;
  };
  const GaitModel m = GaitModel::learn(codes, persons, 2, {true, true, true, true, false});
  ASSERT_EQ(m.basis.size(), 2u);
  EXPECT_NEAR(within(m), 1.0, 1e-5);  // the power iteration's basis is orthonormal to ~1e-7
  EXPECT_NEAR(m.mean.v[0], 1.5, 1e-12);  // person a's mean 3 (slow walk included), b's 0
  EXPECT_EQ(m.person_cycles.at("a").size(), 2u);
  EXPECT_EQ(m.person_cycles.at("b").size(), 2u);
  // Without the labels the slow walk counts as walk-to-walk variation.
  EXPECT_GT(within(GaitModel::learn(codes, persons, 2)), 5.0);
  // A person with only instructed-pace walks keeps them (so every person still counts).
  const GaitModel only = GaitModel::learn(codes, persons, 2, {true, true, false, false, false});
  EXPECT_EQ(only.person_cycles.at("b").size(), 2u);
}

fs::path fresh_dir(const std::string& name) {
  const fs::path d = test_scratch_dir("gait_motion_" + name);
  fs::remove_all(d);
  return d;
}

// The embedded captures were written by this packer, so packing them again at step 1
// gives every motion file back byte for byte, and their MANIFEST's frames and labels.
TEST(MocapPack, RepackingTheEmbeddedCapturesAtStepOneChangesNoFile) {
  const fs::path src = default_mocap_dir(), out = fresh_dir("repack");
  std::vector<std::string> problems;
  const MocapPackSummary sum = pack_mocap_folder(src, out, 1, problems);
  EXPECT_TRUE(problems.empty());
  std::size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(src)) {
    const std::string ext = e.path().extension().string();
    if (ext != ".bvh" && ext != ".amc" && ext != ".asf") continue;
    ++files;
    const fs::path packed = out / fs::relative(e.path(), src);
    ASSERT_TRUE(fs::exists(packed)) << packed;
    EXPECT_TRUE(common::read_file(packed) == common::read_file(e.path())) << e.path();
  }
  EXPECT_GT(sum.clips, 20u);
  EXPECT_GT(files, sum.clips);  // the ASF skeletons too
  std::vector<std::string> p2;
  const auto before = read_mocap_manifest(src / "MANIFEST.tsv", p2);
  const auto after = read_mocap_manifest(out / "MANIFEST.tsv", p2);
  ASSERT_EQ(after.size(), before.size());
  for (const auto& [file, row] : before) {
    ASSERT_TRUE(after.count(file)) << file;
    EXPECT_EQ(after.at(file).description, row.description) << file;
    EXPECT_EQ(after.at(file).format, row.format) << file;
    EXPECT_NEAR(after.at(file).fps, row.fps, 1e-9) << file;
  }
  EXPECT_EQ(load_mocap_folder(out, p2).size(), sum.clips);
  fs::remove_all(out);
}

// A malformed MANIFEST row and AMC clips without their skeleton are reported; the
// other clips still load.
TEST(MocapFolder, ProblemsAreReportedAndTheRestLoads) {
  const fs::path dir = fresh_dir("problems");
  fs::create_directories(dir / "01");
  fs::create_directories(dir / "02");
  common::write_file_atomic(dir / "01" / "01_01.bvh", finger_bvh(4));
  fs::copy_file(default_mocap_dir() / "16" / "16_15.amc", dir / "02" / "02_01.amc");
  common::write_file_atomic(dir / "MANIFEST.tsv", "file\tformat\tfps\tdescription\n01/01_01.bvh\tbvh\n");
  std::vector<std::string> problems;
  const auto clips = load_mocap_folder(dir, problems);
  ASSERT_EQ(clips.size(), 1u);
  EXPECT_EQ(clips[0].person, "01");
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_NE(problems[0].find("MANIFEST.tsv:2: 2 fields, header has 4: ignored"), std::string::npos) << problems[0];
  EXPECT_NE(problems[1].find("02: AMC files but no .asf skeleton: skipped"), std::string::npos) << problems[1];
  fs::remove_all(dir);
}

TEST(MocapPack, BadInputChangesNothing) {
  const fs::path src = fresh_dir("bad_src"), out = fresh_dir("bad_out");
  fs::create_directories(src / "01");
  common::write_file_atomic(src / "01" / "01_01.bvh", finger_bvh(4));
  std::vector<std::string> problems;
  EXPECT_EQ(pack_mocap_folder(src, out, 2, problems).clips, 1u);
  const BvhFile packed = read_bvh_file(out / "01" / "01_01.bvh");
  EXPECT_EQ(packed.frames.size(), 2u);
  EXPECT_EQ(packed.joints.size(), 5u);
  const std::string manifest = common::read_file(out / "MANIFEST.tsv");
  EXPECT_NE(manifest.find("01\t01\t01/01_01.bvh\tbvh-cgspeed-daz\t2\t50\t4\t100\t"), std::string::npos) << manifest;
  // A second clip that does not parse: one line naming it, and the earlier copy stays.
  common::write_file_atomic(src / "01" / "01_02.bvh", finger_bvh(4).substr(0, 200));
  const auto error_of = [&](const fs::path& from, const fs::path& to, int step) -> std::string {
    try {
      pack_mocap_folder(from, to, step, problems);
    } catch (const common::Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of(src, out, 1).find("01_02.bvh"), std::string::npos);
  EXPECT_EQ(read_bvh_file(out / "01" / "01_01.bvh").frames.size(), 2u);
  EXPECT_FALSE(fs::exists(out / "01" / "01_02.bvh"));
  EXPECT_NE(error_of(src, src / "packed", 1).find("overlap"), std::string::npos);
  EXPECT_NE(error_of(src.string() + "/", src / "packed/", 1).find("overlap"), std::string::npos);
  EXPECT_NE(error_of(src / "missing", out, 1).find("no such folder"), std::string::npos);
  EXPECT_NE(error_of(src, out / "MANIFEST.tsv", 1).find("output folder"), std::string::npos);
  EXPECT_NE(error_of(src, out, 0).find("step 0"), std::string::npos);
  EXPECT_FALSE(fs::exists(src / "packed"));
  fs::remove_all(src);
  fs::remove_all(out);
}

}  // namespace
}  // namespace gait
