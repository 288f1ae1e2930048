// The index and the cache builder on a hand-made dataset full of problems: every
// problem is skipped and counted, and only the usable sequences reach the cache.
#include <gtest/gtest.h>

#include "gait/testing_tmp.hpp"

#include <filesystem>

#include "common/check.hpp"
#include "common/files.hpp"
#include "common/png_fast.hpp"
#include "gait/cache_build.hpp"
#include "gait/dataset.hpp"
#include "gait/gei_baseline.hpp"

namespace gait {
namespace {

namespace fs = std::filesystem;

void write_frames(const fs::path& root, const SequenceKey& k, int first, int count) {
  auto img = common::Image::blank(320, 240, 1);
  for (int y = 50; y < 180; ++y)
    for (int x = 150; x < 175; ++x) img.at(y, x) = 255;
  const auto png = common::encode_png_fast(img);
  const fs::path dir = root / subject_name(k.subject) / seq_dir_name(k) / view_name(k.view);
  for (int f = first; f < first + count; ++f)
    common::write_file_atomic(dir / frame_file_name(k, f), std::string(png.begin(), png.end()));
}

PoseSequence pose_rows(int first, int count) {
  PoseSequence s;
  for (int f = first; f < first + count; ++f) {
    PoseFrame p;
    for (auto& k : p) k = {160, 100, 0.9f};
    s.frame_ids.push_back(f);
    s.frames.push_back(p);
  }
  return s;
}

TEST(Dataset, ProblemsAreSkippedAndCounted) {
  const fs::path root = test_scratch_dir("gait_dataset_test");
  fs::remove_all(root);
  const SequenceKey good{1, Condition::NM, 1, 90}, shortseq{1, Condition::BG, 1, 90}, nopose{2, Condition::CL, 2, 0},
      poseonly{3, Condition::NM, 5, 18};
  write_frames(root / "silhouettes", good, 10, 12);
  write_frames(root / "silhouettes", shortseq, 1, 3);
  write_frames(root / "silhouettes", nopose, 1, 8);
  fs::create_directories(root / "silhouettes" / "001" / "nm-02" / "036");  // empty view folder
  fs::create_directories(root / "silhouettes" / "abc");                    // not a subject
  fs::create_directories(root / "silhouettes" / "001" / "xx-01");          // not a sequence
  common::write_file_atomic(root / "pose" / "a.csv", pose_csv_text(good, pose_rows(12, 20)) );
  common::write_file_atomic(root / "pose" / "b.csv", pose_csv_text(shortseq, pose_rows(1, 3)) + "garbage,row\n");
  common::write_file_atomic(root / "pose" / "c.csv", pose_csv_text(poseonly, pose_rows(1, 5)));

  const DatasetIndex idx = scan_dataset(resolve_dataset(root));
  const IndexReport& r = idx.report;
  EXPECT_EQ(r.sequences, 4u);  // good, short, no pose, pose only
  EXPECT_EQ(r.with_silhouettes, 3u);
  EXPECT_EQ(r.with_pose, 3u);
  EXPECT_EQ(r.with_both, 2u);
  EXPECT_EQ(r.empty_folders, 1u);
  EXPECT_EQ(r.ignored_names, 2u);
  EXPECT_EQ(r.pose.bad_field_count, 1u);
  const auto& g = *std::find_if(idx.entries.begin(), idx.entries.end(), [&](const IndexEntry& e) { return e.key == good; });
  EXPECT_EQ(g.sil_frame_ids.size(), 12u);  // frames 10..21
  EXPECT_EQ(g.aligned_frames, 10u);        // pose covers 12..31
  // The report's counts: the pose-only sequence counts its rows but not as a sequence.
  const DatasetCounts n = count_dataset(idx);
  EXPECT_EQ(n.total.sequences, 3u);
  EXPECT_EQ(n.total.frames, 12u + 3u + 8u);
  EXPECT_EQ(n.total.pose_rows, 20u + 3u + 5u);
  EXPECT_EQ(n.by_subject.at(1).at(Condition::NM).frames, 12u);
  EXPECT_EQ(n.by_subject.at(3).at(Condition::NM).sequences, 0u);
  EXPECT_EQ(n.by_view.at(90).sequences, 2u);
  EXPECT_EQ(n.by_subject_view.at(2).at(Condition::CL).at(0).frames, 8u);
  EXPECT_EQ(n.by_subject_view.at(2).at(Condition::CL).at(0).aligned, 0u);  // the dataset has pose, this sequence none
  EXPECT_EQ(n.missing_standard, 3u * 110u - 3u);  // subjects 1-3 hold 3 of their 110 standard sequences

  CacheBuildOptions o;
  o.progress = false;
  const CacheBuildReport c = build_cache(idx, root / "cache", o);
  EXPECT_EQ(c.written, 1u);
  EXPECT_EQ(c.skipped_too_short, 1u);
  EXPECT_EQ(c.skipped_no_pose, 1u);
  EXPECT_EQ(c.skipped_no_silhouettes, 1u);
  EXPECT_EQ(c.frames_without_pose, 2u);
  const CachedSequence s = read_cached_sequence(cache_path(root / "cache", good));
  EXPECT_EQ(s.sil.frame_ids.front(), 12);
  EXPECT_EQ(s.pose.size(), 10u);
  // A second run reuses the valid file.
  EXPECT_EQ(build_cache(idx, root / "cache", o).reused, 1u);
  fs::remove_all(root);
}

TEST(Dataset, NothingUsable) {
  const fs::path root = test_scratch_dir("gait_dataset_empty");
  fs::remove_all(root);
  write_frames(root, {4, Condition::NM, 1, 0}, 1, 2);  // too short, and no pose folder
  const DatasetIndex idx = scan_dataset(resolve_dataset(root));
  EXPECT_FALSE(idx.has_pose());
  CacheBuildOptions o;
  o.progress = false;
  EXPECT_EQ(build_cache(idx, root / "cache", o).usable(), 0u);
  EXPECT_THROW(resolve_dataset(root / "missing"), common::Error);
  fs::remove_all(root);
}


// GEI baseline: two test identities with different silhouettes are always told apart;
// a probe that looks like the other identity is always wrong.
TEST(GeiBaseline, KnownAnswers) {
  const fs::path root = test_scratch_dir("gait_gei_test");
  fs::remove_all(root);
  auto seq = [&](int subject, Condition c, int n, int view, std::uint8_t level) {
    CachedSequence s;
    s.key = {subject, c, n, view};
    for (int t = 0; t < 5; ++t) {
      s.sil.frame_ids.push_back(t);
      s.sil.pixels.insert(s.sil.pixels.end(), kSilPixels, level);
    }
    write_cached_sequence(cache_path(root, s.key), s);
  };
  for (int subject : {1, 2})
    for (int view : {0, 90}) {
      const std::uint8_t own = subject == 1 ? 50 : 200, other = subject == 1 ? 200 : 50;
      for (int n = 1; n <= 6; ++n) seq(subject, Condition::NM, n, view, own);
      seq(subject, Condition::BG, 1, view, own);
      seq(subject, Condition::CL, 1, view, other);  // looks like the other subject
    }
  std::vector<std::string> problems;
  Protocol p;
  p.train_last_subject = 0;
  const BaselineResult r = gei_rank1(scan_cache(root, problems), p);
  EXPECT_EQ(r.test_subjects, 2);
  EXPECT_DOUBLE_EQ(r.rank1[0], 1.0);
  EXPECT_DOUBLE_EQ(r.rank1[1], 1.0);
  EXPECT_DOUBLE_EQ(r.rank1[2], 0.0);
  EXPECT_EQ(r.per_view[0].size(), 2u);
  fs::remove_all(root);
}

}  // namespace
}  // namespace gait
