// The binary sequence cache: exact round trip, and refusal of damaged files.
#include <gtest/gtest.h>

#include "gait/testing_tmp.hpp"

#include <filesystem>

#include "common/check.hpp"
#include "gait/seq_cache.hpp"
#include "gait/dataset.hpp"

namespace gait {
namespace {

CachedSequence sample(bool with_pose) {
  CachedSequence s;
  s.key = {7, Condition::CL, 2, 162};
  for (int t = 0; t < 6; ++t) {
    s.sil.frame_ids.push_back(30 + 2 * t);
    for (std::size_t p = 0; p < kSilPixels; ++p) s.sil.pixels.push_back(static_cast<std::uint8_t>((p * 31 + t) & 0xFF));
    if (with_pose) {
      PoseFrame f;
      for (int j = 0; j < kCocoJoints; ++j) f[j] = {1.5f * j + t, 2.25f * j, 0.125f * (j % 8)};
      s.pose.push_back(f);
    }
  }
  return s;
}

void expect_equal(const CachedSequence& a, const CachedSequence& b) {
  EXPECT_EQ(a.key, b.key);
  EXPECT_EQ(a.sil.frame_ids, b.sil.frame_ids);
  EXPECT_EQ(a.sil.pixels, b.sil.pixels);
  ASSERT_EQ(a.pose.size(), b.pose.size());
  for (std::size_t t = 0; t < a.pose.size(); ++t)
    for (int j = 0; j < kCocoJoints; ++j) {
      EXPECT_EQ(a.pose[t][j].x, b.pose[t][j].x);
      EXPECT_EQ(a.pose[t][j].conf, b.pose[t][j].conf);
    }
}

TEST(SeqCache, Crc32KnownValue) { EXPECT_EQ(crc32("123456789", 9), 0xCBF43926u); }

TEST(SeqCache, RoundTripIsExact) {
  for (bool pose : {true, false}) {
    const auto s = sample(pose);
    const auto bytes = encode_cached_sequence(s);
    expect_equal(decode_cached_sequence(bytes.data(), bytes.size(), "mem"), s);
  }
}

TEST(SeqCache, FileRoundTripAndHeader) {
  const auto dir = test_scratch_dir("gait_cache_test");
  std::filesystem::remove_all(dir);
  const auto s = sample(true);
  const auto path = cache_path(dir, s.key);
  EXPECT_EQ(path.filename().string(), "007-cl-02-162.gseq");
  write_cached_sequence(path, s);
  expect_equal(read_cached_sequence(path), s);
  const auto h = read_cache_header(path);
  EXPECT_EQ(h.key, s.key);
  EXPECT_EQ(h.frames, 6u);
  EXPECT_EQ(h.joints, 17u);
  std::filesystem::remove_all(dir);
}

void expect_refused(std::vector<std::uint8_t> bytes, const std::string& needle) {
  try {
    decode_cached_sequence(bytes.data(), bytes.size(), "damaged.gseq");
    FAIL() << "accepted a damaged file";
  } catch (const common::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("damaged.gseq"), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }
}

TEST(SeqCache, DamagedFilesAreRefusedWithTheFileName) {
  const auto good = encode_cached_sequence(sample(true));
  auto flipped = good;
  flipped[kCacheHeaderBytes + 100] ^= 0x01;
  expect_refused(flipped, "checksum");
  expect_refused(std::vector<std::uint8_t>(good.begin(), good.end() - 7), "truncated");
  auto version = good;
  version[8] = 99;
  expect_refused(version, "version");
  expect_refused(std::vector<std::uint8_t>(good.begin(), good.begin() + 20), "not a gait sequence cache");
}

TEST(Alignment, ByFrameNumberDropsUnmatchedFrames) {
  const auto a = align_frames({10, 11, 12, 13, 14}, {11, 12, 14, 15});
  EXPECT_EQ(a.method, FrameAlignment::Method::ByFrameNumber);
  EXPECT_EQ(a.pose_row, (std::vector<int>{-1, 0, 1, -1, 2}));
  EXPECT_EQ(a.matched(), 3u);
}

TEST(Alignment, DisjointNumberingIsResampled) {
  const auto a = align_frames({1, 2, 3, 4, 5}, {100, 101, 102});
  EXPECT_EQ(a.method, FrameAlignment::Method::Resampled);
  EXPECT_EQ(a.pose_row, (std::vector<int>{0, 1, 1, 2, 2}));  // round(i/4 * 2)
  EXPECT_EQ(align_frames({1, 2}, {}).method, FrameAlignment::Method::NoPose);
}

}  // namespace
}  // namespace gait
