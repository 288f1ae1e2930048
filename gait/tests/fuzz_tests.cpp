// Property/fuzz tests: corrupt PNG, CSV, cache and motion files go to the readers;
// every outcome is a result or a common::Error naming the source, never a crash.
// Inputs are derived deterministically from fixed seeds.
#include <gtest/gtest.h>

#include "gait/testing_tmp.hpp"

#include <filesystem>

#include "common/check.hpp"
#include "common/files.hpp"
#include "common/testing.hpp"
#include "common/png_fast.hpp"
#include "gait/motion/asf_amc.hpp"
#include "gait/motion/bvh.hpp"
#include "gait/pose.hpp"
#include "gait/rng.hpp"
#include "gait/seq_cache.hpp"
#include "gait/silhouettes.hpp"

namespace gait {
namespace {

namespace fs = std::filesystem;

std::vector<std::uint8_t> walker_png() {
  auto img = common::Image::blank(320, 240, 1);
  for (int y = 60; y < 190; ++y)
    for (int x = 150 + (y % 7); x < 175 + (y % 5); ++x) img.at(y, x) = 255;
  return common::encode_png_fast(img);
}

std::vector<std::uint8_t> mutate(const std::vector<std::uint8_t>& in, Rng& rng) {
  std::vector<std::uint8_t> out = in;
  switch (rng.below(4)) {
    case 0: out.resize(static_cast<std::size_t>(rng.below(static_cast<int>(out.size())))); break;  // truncate
    case 1:
      for (int i = 0, n = 1 + rng.below(8); i < n; ++i) out[rng.below(static_cast<int>(out.size()))] ^= 1 << rng.below(8);
      break;
    case 2:
      for (int i = 0, n = 1 + rng.below(16); i < n; ++i) out[rng.below(static_cast<int>(out.size()))] = static_cast<std::uint8_t>(rng.below(256));
      break;
    default: {  // splice a random block
      const int a = rng.below(static_cast<int>(out.size())), len = rng.below(64);
      out.insert(out.begin() + a, static_cast<std::size_t>(len), static_cast<std::uint8_t>(rng.below(256)));
    }
  }
  return out;
}

TEST(Fuzz, CorruptPngsDecodeOrFailCleanly) {
  const auto good = walker_png();
  Rng rng(1);
  int ok = 0, failed = 0;
  for (int i = 0; i < 1500; ++i) {
    const auto bytes = mutate(good, rng);
    try {
      const auto img = common::decode_png(bytes.data(), bytes.size(), 1, "fuzz.png");
      preprocess_silhouette(img);  // whatever decoded must also preprocess
      ++ok;
    } catch (const common::Error& e) {
      EXPECT_NE(std::string(e.what()).find("fuzz.png"), std::string::npos) << e.what();
      ++failed;
    }
  }
  EXPECT_GT(failed, 500);
  EXPECT_EQ(ok + failed, 1500);
}

TEST(Fuzz, SilhouetteFolderCountsEveryBadFrame) {
  const fs::path dir = test_scratch_dir("gait_fuzz_folder") / "001" / "nm-01" / "090";
  fs::remove_all(dir.parent_path().parent_path().parent_path());
  const SequenceKey key{1, Condition::NM, 1, 90};
  const auto good = walker_png();
  auto write = [&](int frame, const std::vector<std::uint8_t>& b) {
    common::write_file_atomic(dir / frame_file_name(key, frame), std::string(b.begin(), b.end()));
  };
  for (int f = 1; f <= 8; ++f) write(f, good);
  write(9, std::vector<std::uint8_t>(good.begin(), good.begin() + good.size() / 2));  // truncated
  write(10, {});                                                                      // empty file
  write(11, common::encode_png_fast(common::Image::blank(64, 48, 1, 255)));            // wrong size
  write(12, common::encode_png_fast(common::Image::blank(320, 240, 1)));               // empty frame
  SilReadStats stats;
  const auto seq = read_silhouette_folder(dir, stats);
  EXPECT_EQ(seq.frames(), 8u);
  EXPECT_EQ(stats.files, 12u);
  EXPECT_EQ(stats.corrupt, 2u);
  EXPECT_EQ(stats.bad_size, 1u);
  EXPECT_EQ(stats.near_empty, 1u);
  ASSERT_EQ(stats.problems.size(), 3u);
  EXPECT_NE(stats.problems[0].find("001-nm-01-090-009.png"), std::string::npos) << stats.problems[0];
  SilReadStats missing;
  EXPECT_EQ(read_silhouette_folder(dir / "nope", missing).frames(), 0u);
  EXPECT_NE(missing.problems.at(0).find("missing folder"), std::string::npos);
  fs::remove_all(dir.parent_path().parent_path().parent_path());
}

TEST(Fuzz, GarbageCsvNeverThrowsAndEveryRowIsAccounted) {
  const SequenceKey key{12, Condition::CL, 1, 36};
  PoseSequence seq;
  for (int f = 1; f <= 40; ++f) {
    PoseFrame p;
    for (int j = 0; j < kCocoJoints; ++j) p[j] = {100.0f + j, 80.0f + f, 0.8f};
    seq.frame_ids.push_back(f);
    seq.frames.push_back(p);
  }
  const std::string good = pose_csv_text(key, seq);
  Rng rng(7);
  const std::string alphabet = "0123456789.,-+eEnaif\n\r \t/abc";
  for (int i = 0; i < 400; ++i) {
    std::string text = good;
    for (int k = 0, n = 1 + rng.below(30); k < n; ++k) {
      const std::size_t at = static_cast<std::size_t>(rng.below(static_cast<int>(text.size())));
      switch (rng.below(3)) {
        case 0: text[at] = alphabet[rng.below(static_cast<int>(alphabet.size()))]; break;
        case 1: text.erase(at, static_cast<std::size_t>(rng.below(40))); break;
        default: text.insert(at, std::string(static_cast<std::size_t>(rng.below(5)), alphabet[rng.below(static_cast<int>(alphabet.size()))]));
      }
    }
    PoseCsvReader r;
    r.add_text(text, "fuzz.csv");
    const PoseTable t = r.finish();
    const auto& s = r.stats();
    EXPECT_EQ(s.rows, s.rows_used + s.skipped_rows()) << i;
    std::size_t frames = 0;
    for (const auto& [k, ps] : t) {
      frames += ps.frames.size();
      for (const auto& f : ps.frames)
        for (const auto& kp : f) {
          ASSERT_TRUE(std::isfinite(kp.x) && std::isfinite(kp.y) && std::isfinite(kp.conf));
          ASSERT_GE(kp.conf, 0.0f);
          ASSERT_LE(kp.conf, 1.0f);
        }
    }
    EXPECT_EQ(frames, s.rows_used);
  }
}

TEST(Fuzz, CorruptCacheAndMotionFilesFailCleanly) {
  CachedSequence s;
  s.key = {1, Condition::NM, 1, 0};
  for (int t = 0; t < 5; ++t) {
    s.sil.frame_ids.push_back(t);
    s.sil.pixels.insert(s.sil.pixels.end(), kSilPixels, static_cast<std::uint8_t>(t * 40));
    s.pose.push_back(PoseFrame{});
  }
  const auto good = encode_cached_sequence(s);
  Rng rng(9);
  for (int i = 0; i < 300; ++i) {
    const auto b = mutate(good, rng);
    try {
      decode_cached_sequence(b.data(), b.size(), "fuzz.gseq");
    } catch (const common::Error& e) {
      EXPECT_NE(std::string(e.what()).find("fuzz.gseq"), std::string::npos);
    }
  }
  const std::string bvh = common::read_file(fs::path(XSTAGE_SOURCE_DIR_FOR_TESTS) / "gait/data/mocap/07/07_01.bvh");
  const std::string amc = common::read_file(fs::path(XSTAGE_SOURCE_DIR_FOR_TESTS) / "gait/data/mocap/16/16_15.amc");
  const AsfSkeleton asf = read_asf_file(fs::path(XSTAGE_SOURCE_DIR_FOR_TESTS) / "gait/data/mocap/16/16.asf");
  for (int i = 0; i < 60; ++i) {
    const auto cut = static_cast<std::size_t>(rng.below(static_cast<int>(bvh.size())));
    std::string t = bvh.substr(0, cut);
    if (rng.chance(0.5) && !t.empty()) t[rng.below(static_cast<int>(t.size()))] = 'Z';
    try {
      bvh_to_clip(parse_bvh(t, "fuzz.bvh"), "f", "p");
    } catch (const common::Error& e) {
      EXPECT_NE(std::string(e.what()).find("fuzz.bvh"), std::string::npos) << e.what();
    }
    std::string a = amc.substr(0, static_cast<std::size_t>(rng.below(static_cast<int>(amc.size()))));
    if (rng.chance(0.5) && !a.empty()) a[rng.below(static_cast<int>(a.size()))] = 'x';
    try {
      amc_to_clip(asf, parse_amc(a, "fuzz.amc"), 40, "f", "p");
    } catch (const common::Error&) {
    }
  }
}

// Inputs libFuzzer found (fuzz/corpus/*/regress-*): each used to reach undefined
// behaviour (UBSan) and is now refused with one line naming the file.
TEST(Fuzz, FoundByLibFuzzerAndNowRefused) {
  const std::string count = common::error_of([] {
    parse_bvh("HIERARCHY\nROOT hip\n{\n OFFSET 0 0 0\n CHANNELS 11111111111111111111111111111111111111111111111111111"
              "111111111111111111111111111116 Xposition\n}\n",
              "big.bvh");
  });
  EXPECT_NE(count.find("big.bvh:5: '1111"), std::string::npos) << count;
  EXPECT_NE(count.find("is not a count"), std::string::npos) << count;
  const std::string channel = common::error_of([] { parse_asf(":root\n order ab ty\n", "r.asf"); });
  EXPECT_NE(channel.find("bad :root order channel 'ab'"), std::string::npos) << channel;
  CachedSequence s;
  s.key = {1, Condition::NM, 1, 0};
  for (int t = 0; t < 5; ++t) {
    s.sil.frame_ids.push_back(t);
    s.sil.pixels.insert(s.sil.pixels.end(), kSilPixels, 0);
  }
  auto bytes = encode_cached_sequence(s);
  std::fill(bytes.begin() + 20, bytes.begin() + 24, 0);  // frames = 0
  const std::string frames = common::error_of([&] { decode_cached_sequence(bytes.data(), bytes.size(), "z.gseq"); });
  EXPECT_NE(frames.find("z.gseq: 0 frames, fewer than the 5"), std::string::npos) << frames;
}

}  // namespace
}  // namespace gait
