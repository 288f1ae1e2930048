#include "gait/train/data_source.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "common/check.hpp"
#include "common/files.hpp"
#include "common/parallel.hpp"
#include "gait/dataset.hpp"

namespace gait::train {

namespace fs = std::filesystem;

namespace {

// Subject range, pose availability and the protocol, from the entries.
void finish_data_source(DataSource& src, const DataConfig& cfg) {
  for (const auto& e : src.entries) src.max_subject = std::max(src.max_subject, e.key.subject);
  src.has_pose = std::all_of(src.entries.begin(), src.entries.end(), [](const CacheEntry& e) { return e.has_pose; });
  src.protocol = protocol_for_subjects(src.max_subject);
  if (cfg.train_last_subject > 0) src.protocol.train_last_subject = cfg.train_last_subject;
}

}  // namespace

DataSource open_data_source(const DataConfig& cfg, bool progress) {
  XS_ASSERT(!cfg.root.empty(), "data.root is empty: give the dataset folder in the config or with --data");
  DataSource src;
  const fs::path root = cfg.root;
  src.cache_dir = cfg.cache.empty() ? root / "cache" : fs::path(cfg.cache);
  std::vector<std::string> problems;
  if (cfg.cache_only) {
    std::error_code ec;
    XS_ASSERT(fs::is_directory(src.cache_dir, ec), "data.cache_only: no cache folder {} (run gait preprocess {} --cache {})",
              src.cache_dir.string(), root.string(), src.cache_dir.string());
    src.entries = scan_cache(src.cache_dir, problems);
    XS_ASSERT(!src.entries.empty(), "data.cache_only: {} holds no usable sequence (run gait preprocess first)",
              src.cache_dir.string());
    finish_data_source(src, cfg);
    return src;
  }
  std::optional<fs::path> pose;
  if (!cfg.pose.empty()) pose = fs::path(cfg.pose);
  const DatasetIndex index = scan_dataset(resolve_dataset(root, pose));
  // New cache files appear only once the whole build has finished (the cache is
  // complete then and valid whatever the command does next).
  common::OutputStage stage(src.cache_dir);
  CacheBuildOptions opts;
  opts.progress = progress;
  opts.write_dir = stage.dir();
  const CacheBuildReport rep = build_cache(index, src.cache_dir, opts);
  if (rep.usable() > 0) stage.commit();
  if (rep.written > 0 && progress)
    fmt::print(stderr, "cache: {} sequences written, {} reused, {} skipped, in {}\n", rep.written, rep.reused,
               rep.skipped_too_short + rep.skipped_no_pose + rep.skipped_no_silhouettes, src.cache_dir.string());
  src.entries = scan_cache(src.cache_dir, problems);
  // Keep only what the index still lists (a cache may hold sequences of an older dataset).
  std::vector<SequenceKey> keys;
  for (const auto& e : index.entries) keys.push_back(e.key);
  std::sort(keys.begin(), keys.end());
  std::erase_if(src.entries, [&](const CacheEntry& e) { return !std::binary_search(keys.begin(), keys.end(), e.key); });
  if (src.entries.empty())
    throw common::Error(fmt::format("{}: no usable sequence (cache {})", root.string(), src.cache_dir.string()));
  finish_data_source(src, cfg);
  return src;
}

std::vector<std::size_t> select_entries(const DataSource& src, bool train) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < src.entries.size(); ++i)
    if (src.protocol.is_train(src.entries[i].key.subject) == train) out.push_back(i);
  return out;
}

std::vector<CachedSequence> load_sequences(const DataSource& src, const std::vector<std::size_t>& which, int threads) {
  std::vector<CachedSequence> out(which.size());
  std::vector<std::string> errors(which.size());  // every file is read; the first bad one (in order) is reported
  common::parallel_for(which.size(), threads, [&](std::size_t i) {
    try {
      out[i] = read_cached_sequence(src.entries[which[i]].path);
    } catch (const common::Error& e) {
      errors[i] = e.what();
    }
  });
  for (const auto& e : errors)
    if (!e.empty()) throw common::Error(e);
  return out;
}

}  // namespace gait::train
