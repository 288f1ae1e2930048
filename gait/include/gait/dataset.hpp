// The sequence index: one entry per (subject, condition, sequence, view) joining the
// silhouette folder and the pose rows of that sequence.
//
// A dataset root is either
//   - a `gait synth` output: ROOT/silhouettes (the CASIA-B layout) and ROOT/pose (CSV files), or
//   - a CASIA-B silhouette root ROOT/<sid>/<cond>-<nn>/<view>/, with pose CSVs given separately
//     (a GaitGraph CSV file or a folder of them) or none.
// Scanning lists files only; decoding happens in build_cache (gait/cache_build.hpp).
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gait/casiab.hpp"
#include "gait/pose.hpp"

namespace gait {

struct DatasetPaths {
  std::filesystem::path silhouettes;
  std::optional<std::filesystem::path> pose;
};
// Throws common::Error naming the folder when ROOT (or the pose path) does not exist.
DatasetPaths resolve_dataset(const std::filesystem::path& root,
                             const std::optional<std::filesystem::path>& pose = std::nullopt);

// How silhouette frames map to pose rows. Real CASIA-B pose and silhouette frame counts
// differ (the detector and the background subtraction see the person in different
// frames), so rows are matched by video frame number; a silhouette frame without a
// pose row is dropped. When no frame number matches at all (a different numbering),
// pose rows are resampled onto the silhouette frames by relative position.
struct FrameAlignment {
  enum class Method { ByFrameNumber, Resampled, NoPose };
  Method method = Method::NoPose;
  std::vector<int> pose_row;  // per silhouette frame: its pose row, or -1 (frame dropped)
  std::size_t matched() const;
};
FrameAlignment align_frames(const std::vector<int>& sil_frame_ids, const std::vector<int>& pose_frame_ids);

struct IndexEntry {
  SequenceKey key;
  std::filesystem::path sil_dir;      // empty when only pose exists
  std::vector<int> sil_frame_ids;     // from the file names, before preprocessing
  std::size_t pose_rows = 0;          // after the reader's repairs
  std::size_t aligned_frames = 0;     // silhouette files with a pose row (or all, without pose)
};

struct IndexReport {
  std::size_t sequences = 0, with_silhouettes = 0, with_pose = 0, with_both = 0;
  std::size_t empty_folders = 0, ignored_names = 0, resampled = 0;
  PoseCsvStats pose;
  std::vector<std::string> problems;  // ignored names, empty folders, pose-only sequences
};

struct DatasetIndex {
  DatasetPaths paths;
  std::vector<IndexEntry> entries;  // sorted by key
  PoseTable poses;
  IndexReport report;
  bool has_pose() const { return paths.pose.has_value(); }
};

DatasetIndex scan_dataset(const DatasetPaths& paths, PoseCsvOptions pose_opts = {});

// An index counted for a report (`gait index`): usable sequences (with silhouettes),
// their frames, pose rows and aligned frames per subject and condition, per view, per
// (subject, condition, view) and in total; and the sequences of the standard CASIA-B
// layout (standard_sequences() at standard_views()) that the subjects present lack.
struct SequenceCounts {
  std::size_t sequences = 0, frames = 0, pose_rows = 0, aligned = 0;
  void add(const IndexEntry& e);
};
struct DatasetCounts {
  std::map<int, std::map<Condition, SequenceCounts>> by_subject;
  std::map<int, SequenceCounts> by_view;
  std::map<int, std::map<Condition, std::map<int, SequenceCounts>>> by_subject_view;
  SequenceCounts total;
  std::size_t missing_standard = 0;
};
DatasetCounts count_dataset(const DatasetIndex& idx);

}  // namespace gait
