#include "gait/cache_build.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>

#include "common/check.hpp"
#include "common/parallel.hpp"
#include "common/progress.hpp"

namespace gait {

namespace fs = std::filesystem;

CachedSequence preprocess_entry(const DatasetIndex& index, const IndexEntry& entry, SilReadStats& stats,
                                std::size_t& frames_without_pose, std::string& why) {
  CachedSequence out;
  out.key = entry.key;
  if (entry.sil_dir.empty()) {
    why = "no silhouettes";
    return out;
  }
  const PoseSequence* pose = nullptr;
  if (index.has_pose()) {
    auto it = index.poses.find(entry.key);
    if (it == index.poses.end() || it->second.frames.empty()) {
      why = "no pose rows";
      return out;
    }
    pose = &it->second;
  }
  SilhouetteSequence sil = read_silhouette_folder(entry.sil_dir, stats);
  if (pose) {
    const FrameAlignment a = align_frames(sil.frame_ids, pose->frame_ids);
    for (std::size_t t = 0; t < sil.frames(); ++t) {
      if (a.pose_row[t] < 0) {
        ++frames_without_pose;
        continue;
      }
      out.sil.frame_ids.push_back(sil.frame_ids[t]);
      out.sil.pixels.insert(out.sil.pixels.end(), sil.frame(t), sil.frame(t) + kSilPixels);
      out.pose.push_back(pose->frames[a.pose_row[t]]);
    }
  } else {
    out.sil = std::move(sil);
  }
  if (out.sil.frames() < kMinSequenceFrames) {
    why = fmt::format("{} usable frames (< {})", out.sil.frames(), kMinSequenceFrames);
    out.sil = {};
    out.pose.clear();
  }
  return out;
}

CacheBuildReport build_cache(const DatasetIndex& index, const fs::path& cache_dir, const CacheBuildOptions& opts) {
  CacheBuildReport rep;
  const auto& entries = index.entries;
  common::ProgressBar bar("preprocess", entries.size(), opts.progress);
  std::mutex mu;
  common::parallel_for(entries.size(), opts.threads, [&](std::size_t i) {
    const IndexEntry& e = entries[i];
    const fs::path path = cache_path(cache_dir, e.key);
    if (!opts.force) {
      std::error_code ec;
      if (fs::exists(path, ec)) {
        try {
          const CacheHeader h = read_cache_header(path);
          if (h.key == e.key && (h.joints != 0) == index.has_pose()) {
            std::lock_guard lock(mu);
            ++rep.reused;
            rep.frames += h.frames;
            bar.tick();
            return;
          }
        } catch (const common::Error&) {
          // stale or corrupt: rebuilt below
        }
      }
    }
    SilReadStats stats;
    std::size_t no_pose = 0;
    std::string why;
    std::string failure;
    CachedSequence seq = preprocess_entry(index, e, stats, no_pose, why);
    if (seq.sil.frames() > 0) {
      try {
        write_cached_sequence(opts.write_dir.empty() ? path : cache_path(opts.write_dir, e.key), seq);
      } catch (const common::Error& err) {
        failure = err.what();
      }
    }
    std::lock_guard lock(mu);
    rep.sil.merge(stats);
    rep.frames_without_pose += no_pose;
    if (!failure.empty()) {
      rep.problems.push_back(failure);
    } else if (seq.sil.frames() > 0) {
      ++rep.written;
      rep.frames += seq.sil.frames();
    } else {
      if (why == "no pose rows") ++rep.skipped_no_pose;
      else if (why == "no silhouettes") ++rep.skipped_no_silhouettes;
      else ++rep.skipped_too_short;
      rep.problems.push_back(fmt::format("{}: {}: sequence skipped", sequence_id(e.key), why));
    }
    bar.tick();
  });
  bar.finish();
  return rep;
}

std::vector<CacheEntry> scan_cache(const fs::path& cache_dir, std::vector<std::string>& problems) {
  std::vector<CacheEntry> out;
  std::error_code ec;
  if (!fs::is_directory(cache_dir, ec)) throw common::Error(fmt::format("{}: no such cache folder", cache_dir.string()));
  for (auto it = fs::recursive_directory_iterator(cache_dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (!it->is_regular_file() || it->path().extension() != kCacheExtension) continue;
    try {
      const CacheHeader h = read_cache_header(it->path());
      out.push_back({h.key, it->path(), h.frames, h.joints != 0});
    } catch (const common::Error& e) {
      problems.push_back(e.what());
    }
  }
  std::sort(out.begin(), out.end(), [](const CacheEntry& a, const CacheEntry& b) { return a.key < b.key; });
  return out;
}

}  // namespace gait
