// GaitGraph pose CSV reading: round trip, skipping and repairing, counting.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "gait/pose.hpp"

namespace gait {
namespace {

const SequenceKey kKey{3, Condition::BG, 2, 54};

PoseSequence make_seq(std::vector<int> frames) {
  PoseSequence s;
  s.frame_ids = frames;
  for (std::size_t t = 0; t < frames.size(); ++t) {
    PoseFrame f;
    for (int j = 0; j < kCocoJoints; ++j) f[j] = {10.0f + j + t, 20.0f + 2 * j + t, 0.9f};
    s.frames.push_back(f);
  }
  return s;
}

std::string row(const SequenceKey& k, int frame, const std::vector<std::string>& values) {
  std::string r = pose_image_name(k, frame);
  for (const auto& v : values) r += "," + v;
  return r + "\n";
}

std::vector<std::string> joints(float x, float y, float c) {
  std::vector<std::string> v;
  for (int j = 0; j < kCocoJoints; ++j) {
    v.push_back(fmt::format("{}", x));
    v.push_back(fmt::format("{}", y));
    v.push_back(fmt::format("{}", c));
  }
  return v;
}

TEST(PoseCsv, HeaderMatchesGaitGraph) {
  const auto h = pose_csv_header();
  EXPECT_EQ(h.substr(0, 35), "image_name,nose_x,nose_y,nose_conf,");
  EXPECT_NE(h.find("right_ankle_conf\n"), std::string::npos);
  EXPECT_EQ(pose_image_name(kKey, 45), "./003-bg-02-054/000045.jpg");
}

TEST(PoseCsv, RoundTrip) {
  const auto seq = make_seq({4, 5, 6, 9});
  PoseCsvReader r;
  r.add_text(pose_csv_text(kKey, seq), "mem.csv");
  const auto table = r.finish();
  ASSERT_EQ(table.size(), 1u);
  const auto& got = table.at(kKey);
  EXPECT_EQ(got.frame_ids, seq.frame_ids);
  for (std::size_t t = 0; t < seq.frames.size(); ++t)
    for (int j = 0; j < kCocoJoints; ++j) {
      EXPECT_NEAR(got.frames[t][j].x, seq.frames[t][j].x, 0.006);
      EXPECT_NEAR(got.frames[t][j].conf, seq.frames[t][j].conf, 0.001);
    }
  EXPECT_EQ(r.stats().rows_used, 4u);
  EXPECT_EQ(r.stats().skipped_rows(), 0u);
}

TEST(PoseCsv, BadRowsAreSkippedAndCounted) {
  std::string text = pose_csv_header();
  text += row(kKey, 1, joints(10, 10, 0.9f));
  text += row(kKey, 2, {"1", "2", "3"});                    // wrong field count
  text += "not-a-name/000003.jpg" + std::string(51, ',') + "\n";  // bad name (52 fields)
  text += row(kKey, 4, joints(0, 0, 0));                    // every joint missing
  text += row(kKey, 1, joints(11, 11, 0.9f));               // duplicate frame
  text += row(kKey, 5, joints(12, 12, 0.9f));
  PoseCsvReader r;
  r.add_text(text, "bad.csv");
  const auto table = r.finish();
  const auto& s = r.stats();
  EXPECT_EQ(s.rows, 6u);
  EXPECT_EQ(s.bad_field_count, 1u);
  EXPECT_EQ(s.bad_name, 1u);
  EXPECT_EQ(s.all_joints_invalid, 1u);
  EXPECT_EQ(s.duplicate, 1u);
  EXPECT_EQ(s.rows_used, 2u);
  ASSERT_EQ(table.at(kKey).frame_ids, (std::vector<int>{1, 5}));
  ASSERT_FALSE(s.problems.empty());
  EXPECT_NE(s.problems[0].find("bad.csv:3"), std::string::npos) << s.problems[0];
}

TEST(PoseCsv, InvalidJointsAreInterpolatedFromNeighbours) {
  std::string text = pose_csv_header();
  auto a = joints(100, 50, 0.8f), b = joints(120, 70, 0.6f), mid = joints(110, 60, 0.9f);
  mid[0] = "nan";                      // nose x NaN
  mid[3 * kLeftWrist] = "400";         // left wrist out of frame (x > 320)
  mid[3 * kRightAnkle + 2] = "abc";    // unparsable confidence
  mid[3 * kLeftEye] = "0";
  mid[3 * kLeftEye + 1] = "0";
  mid[3 * kLeftEye + 2] = "0";         // (0, 0, 0): not detected
  text += row(kKey, 10, a) + row(kKey, 12, mid) + row(kKey, 20, b);
  PoseCsvReader r;
  r.add_text(text, "nan.csv");
  const auto t = r.finish().at(kKey);
  EXPECT_EQ(r.stats().joints_repaired, 4u);
  // Frame 12 lies 2/10 of the way from frame 10 to frame 20.
  for (int j : {kNose, kLeftWrist, kRightAnkle, kLeftEye}) {
    EXPECT_NEAR(t.frames[1][j].x, 104.0, 1e-4) << j;
    EXPECT_NEAR(t.frames[1][j].y, 54.0, 1e-4) << j;
    EXPECT_NEAR(t.frames[1][j].conf, 0.3, 1e-6) << j;  // half the lower neighbour's confidence
  }
  EXPECT_NEAR(t.frames[1][kRightKnee].x, 110.0, 1e-4);  // valid joints untouched
}

TEST(PoseCsv, EdgeRepairCopiesAndHopelessJointsAreZeroed) {
  std::string text = pose_csv_header();
  auto first = joints(50, 50, 0.5f), second = joints(60, 60, 0.5f);
  first[3 * kNose] = "-5";  // out of frame in the first row: copied from the second
  first[3 * kLeftHip] = "nan";
  second[3 * kLeftHip] = "inf";  // never valid in this sequence
  text += row(kKey, 1, first) + row(kKey, 2, second);
  PoseCsvReader r;
  r.add_text(text, "edge.csv");
  const auto t = r.finish().at(kKey);
  EXPECT_FLOAT_EQ(t.frames[0][kNose].x, 60.0f);
  EXPECT_EQ(r.stats().joints_unrepairable, 2u);
  EXPECT_FLOAT_EQ(t.frames[0][kLeftHip].conf, 0.0f);
}

TEST(PoseCsv, MissingFileIsCountedNotThrown) {
  PoseCsvStats stats;
  const auto t = read_pose_path("/nonexistent/pose.csv", stats);
  EXPECT_TRUE(t.empty());
  ASSERT_EQ(stats.problems.size(), 1u);
  EXPECT_NE(stats.problems[0].find("/nonexistent/pose.csv"), std::string::npos);
}

}  // namespace
}  // namespace gait
