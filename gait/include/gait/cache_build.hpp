// `gait preprocess`: decode, preprocess and align every indexed sequence and write
// one cache file per sequence (gait/seq_cache.hpp), on several threads.
// A sequence is skipped (and counted) when fewer than kMinSequenceFrames frames survive
// preprocessing and alignment, or when the dataset has pose but this sequence has none.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "gait/dataset.hpp"
#include "gait/seq_cache.hpp"
#include "gait/silhouettes.hpp"

namespace gait {

struct CacheBuildOptions {
  int threads = 0;        // 0: all hardware threads
  bool force = false;     // rebuild files that already hold a valid cache
  bool progress = true;
  // Where new cache files are written (empty: cache_dir itself); existing files are
  // still looked for in cache_dir. `gait preprocess` passes a staging folder.
  std::filesystem::path write_dir;
};

struct CacheBuildReport {
  std::size_t written = 0, reused = 0, skipped_too_short = 0, skipped_no_pose = 0, skipped_no_silhouettes = 0;
  std::size_t frames = 0, frames_without_pose = 0;
  SilReadStats sil;
  std::vector<std::string> problems;
  std::size_t usable() const { return written + reused; }
};

// Builds the cached form of one entry (no file I/O besides reading its PNGs).
// Returns a sequence with zero frames when it has to be skipped; `why` says why.
CachedSequence preprocess_entry(const DatasetIndex& index, const IndexEntry& entry, SilReadStats& stats,
                                std::size_t& frames_without_pose, std::string& why);

CacheBuildReport build_cache(const DatasetIndex& index, const std::filesystem::path& cache_dir,
                             const CacheBuildOptions& opts);

// Every cache file below `cache_dir` (headers only), sorted by key. Unreadable or
// stale files are reported in `problems` and left out.
struct CacheEntry {
  SequenceKey key;
  std::filesystem::path path;
  std::uint32_t frames = 0;
  bool has_pose = false;
};
std::vector<CacheEntry> scan_cache(const std::filesystem::path& cache_dir, std::vector<std::string>& problems);

}  // namespace gait
