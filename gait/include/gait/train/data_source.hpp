// From a config's data section to sequences in memory: resolve the dataset root,
// build (or reuse) the preprocessed cache, and read the sequences a run needs.
//
//   ROOT (a `gait synth` output or a CASIA-B silhouette root)
//     -> scan_dataset + build_cache into data.cache (default ROOT/cache); files that
//        already hold a valid cache are reused, so only the first run decodes PNGs
//     -> scan_cache: one CacheEntry per usable sequence
//     -> the protocol for the dataset's subject count (protocol_for_subjects), unless
//        data.train_last_subject fixes the split
//     -> load_sequences: the selected entries read on several threads.
// Torch-free.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "gait/cache_build.hpp"
#include "gait/protocol.hpp"
#include "gait/seq_cache.hpp"
#include "gait/train/config.hpp"

namespace gait::train {

struct DataSource {
  std::filesystem::path cache_dir;
  std::vector<CacheEntry> entries;  // sorted by key
  Protocol protocol;
  int max_subject = 0;
  bool has_pose = false;            // every entry has pose rows
};

// Throws common::Error when the root is missing or no usable sequence remains.
DataSource open_data_source(const DataConfig& cfg, bool progress);

std::vector<std::size_t> select_entries(const DataSource& src, bool train);  // train or test subjects
std::vector<CachedSequence> load_sequences(const DataSource& src, const std::vector<std::size_t>& which, int threads);

}  // namespace gait::train
