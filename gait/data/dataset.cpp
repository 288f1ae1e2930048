#include "gait/dataset.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "common/check.hpp"
#include "common/files.hpp"

namespace gait {

namespace fs = std::filesystem;

std::size_t FrameAlignment::matched() const {
  return static_cast<std::size_t>(std::count_if(pose_row.begin(), pose_row.end(), [](int r) { return r >= 0; }));
}

DatasetPaths resolve_dataset(const fs::path& root, const std::optional<fs::path>& pose) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) throw common::Error(fmt::format("{}: no such dataset folder", root.string()));
  DatasetPaths p;
  if (fs::is_directory(root / "silhouettes", ec)) {
    p.silhouettes = root / "silhouettes";
    if (fs::exists(root / "pose", ec)) p.pose = root / "pose";
  } else {
    p.silhouettes = root;
  }
  if (pose) {
    if (!fs::exists(*pose, ec)) throw common::Error(fmt::format("{}: no such pose file or folder", pose->string()));
    p.pose = *pose;
  }
  return p;
}

FrameAlignment align_frames(const std::vector<int>& sil, const std::vector<int>& pose) {
  FrameAlignment a;
  a.pose_row.assign(sil.size(), -1);
  if (pose.empty()) return a;
  std::map<int, int> row_of;
  for (std::size_t i = 0; i < pose.size(); ++i) row_of.emplace(pose[i], static_cast<int>(i));
  std::size_t hits = 0;
  for (std::size_t i = 0; i < sil.size(); ++i) {
    auto it = row_of.find(sil[i]);
    if (it != row_of.end()) {
      a.pose_row[i] = it->second;
      ++hits;
    }
  }
  if (hits > 0 || sil.empty()) {
    a.method = FrameAlignment::Method::ByFrameNumber;
    return a;
  }
  a.method = FrameAlignment::Method::Resampled;
  for (std::size_t i = 0; i < sil.size(); ++i) {
    const double u = sil.size() == 1 ? 0.0 : static_cast<double>(i) / static_cast<double>(sil.size() - 1);
    a.pose_row[i] = static_cast<int>(std::lround(u * static_cast<double>(pose.size() - 1)));
  }
  return a;
}

namespace {

std::vector<int> frame_ids_of(const fs::path& dir) {
  std::vector<std::pair<std::string, std::optional<int>>> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file(ec) && e.path().extension() == ".png")
      files.emplace_back(e.path().filename().string(), parse_frame_number(e.path().filename().string()));
  std::sort(files.begin(), files.end(), [](const auto& a, const auto& b) {
    if (a.second && b.second && *a.second != *b.second) return *a.second < *b.second;
    if (a.second.has_value() != b.second.has_value()) return a.second.has_value();
    return a.first < b.first;
  });
  std::vector<int> ids;
  for (std::size_t i = 0; i < files.size(); ++i) ids.push_back(files[i].second ? *files[i].second : static_cast<int>(i + 1));
  return ids;
}

}  // namespace

DatasetIndex scan_dataset(const DatasetPaths& paths, PoseCsvOptions pose_opts) {
  DatasetIndex idx;
  idx.paths = paths;
  IndexReport& rep = idx.report;
  auto ignore = [&](const fs::path& p, const char* why) {
    ++rep.ignored_names;
    rep.problems.push_back(fmt::format("{}: ignored ({})", p.string(), why));
  };
  std::map<SequenceKey, IndexEntry> entries;
  for (const auto& sdir : common::sorted_subfolders(paths.silhouettes)) {
    const auto subject = parse_subject(sdir.filename().string());
    if (!subject) {
      ignore(sdir, "not a three-digit subject id");
      continue;
    }
    for (const auto& qdir : common::sorted_subfolders(sdir)) {
      const auto sq = parse_seq_dir(qdir.filename().string());
      if (!sq) {
        ignore(qdir, "not <nm|bg|cl>-<nn>");
        continue;
      }
      for (const auto& vdir : common::sorted_subfolders(qdir)) {
        const auto view = parse_view(vdir.filename().string());
        if (!view) {
          ignore(vdir, "not a three-digit view angle");
          continue;
        }
        IndexEntry e;
        e.key = {*subject, sq->first, sq->second, *view};
        e.sil_dir = vdir;
        e.sil_frame_ids = frame_ids_of(vdir);
        if (e.sil_frame_ids.empty()) {
          ++rep.empty_folders;
          rep.problems.push_back(fmt::format("{}: no PNG frames: sequence skipped", vdir.string()));
          continue;
        }
        entries.emplace(e.key, std::move(e));
      }
    }
  }
  if (paths.pose) idx.poses = read_pose_path(*paths.pose, rep.pose, pose_opts);
  for (const auto& [key, seq] : idx.poses) {
    auto it = entries.find(key);
    if (it == entries.end()) {
      rep.problems.push_back(fmt::format("{}: pose rows but no silhouette folder", sequence_id(key)));
      IndexEntry e;
      e.key = key;
      it = entries.emplace(key, std::move(e)).first;
    }
    it->second.pose_rows = seq.frames.size();
  }
  for (auto& [key, e] : entries) {
    ++rep.sequences;
    if (!e.sil_frame_ids.empty()) ++rep.with_silhouettes;
    if (e.pose_rows > 0) ++rep.with_pose;
    if (!e.sil_frame_ids.empty() && e.pose_rows > 0) ++rep.with_both;
    if (!paths.pose) {
      e.aligned_frames = e.sil_frame_ids.size();
    } else if (e.pose_rows > 0) {
      const auto a = align_frames(e.sil_frame_ids, idx.poses.at(key).frame_ids);
      e.aligned_frames = a.matched();
      if (a.method == FrameAlignment::Method::Resampled) ++rep.resampled;
    }
    idx.entries.push_back(std::move(e));
  }
  return idx;
}

void SequenceCounts::add(const IndexEntry& e) {
  sequences += e.sil_frame_ids.empty() ? 0 : 1;
  frames += e.sil_frame_ids.size();
  pose_rows += e.pose_rows;
  aligned += e.aligned_frames;
}

DatasetCounts count_dataset(const DatasetIndex& idx) {
  DatasetCounts c;
  std::set<SequenceKey> present;
  for (const auto& e : idx.entries) {
    c.by_subject[e.key.subject][e.key.cond].add(e);
    c.by_view[e.key.view].add(e);
    c.by_subject_view[e.key.subject][e.key.cond][e.key.view].add(e);
    c.total.add(e);
    if (!e.sil_frame_ids.empty()) present.insert(e.key);
  }
  for (const auto& [s, conds] : c.by_subject)
    for (auto [cond, n] : standard_sequences())
      for (int v : standard_views()) c.missing_standard += present.count(SequenceKey{s, cond, n, v}) == 0;
  return c;
}

}  // namespace gait
