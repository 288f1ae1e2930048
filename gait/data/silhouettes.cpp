#include "gait/silhouettes.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "common/check.hpp"
#include "gait/casiab.hpp"

namespace gait {

namespace fs = std::filesystem;

void SilReadStats::merge(const SilReadStats& o) {
  files += o.files;
  used += o.used;
  near_empty += o.near_empty;
  no_centre += o.no_centre;
  corrupt += o.corrupt;
  bad_size += o.bad_size;
  problems.insert(problems.end(), o.problems.begin(), o.problems.end());
}

std::vector<fs::path> list_frame_files(const fs::path& dir, SilReadStats& stats) {
  std::vector<fs::path> files;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    stats.problems.push_back(fmt::format("{}: missing folder", dir.string()));
    return files;
  }
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_regular_file(ec) && e.path().extension() == ".png") files.push_back(e.path());
  }
  if (ec) stats.problems.push_back(fmt::format("{}: cannot list ({})", dir.string(), ec.message()));
  std::sort(files.begin(), files.end(), [](const fs::path& a, const fs::path& b) {
    const auto fa = parse_frame_number(a.filename().string()), fb = parse_frame_number(b.filename().string());
    if (fa && fb && *fa != *fb) return *fa < *fb;
    if (fa.has_value() != fb.has_value()) return fa.has_value();
    return a.filename() < b.filename();
  });
  return files;
}

std::vector<RawFrame> read_frame_images(const fs::path& dir, SilReadStats& stats) {
  std::vector<RawFrame> frames;
  const auto files = list_frame_files(dir, stats);
  for (std::size_t i = 0; i < files.size(); ++i) {
    ++stats.files;
    common::Image img;
    try {
      img = common::read_png(files[i], 1);
    } catch (const common::Error& e) {
      ++stats.corrupt;
      stats.problems.push_back(e.what());
      continue;
    }
    if (img.width < kMinFrameSide || img.height < kMinFrameSide) {
      ++stats.bad_size;
      stats.problems.push_back(
          fmt::format("{}: {}x{} is too small for a video frame", files[i].string(), img.width, img.height));
      continue;
    }
    if (!frames.empty() && (img.width != frames[0].image.width || img.height != frames[0].image.height)) {
      ++stats.bad_size;
      stats.problems.push_back(fmt::format("{}: {}x{} differs from the sequence's {}x{}", files[i].string(), img.width,
                                           img.height, frames[0].image.width, frames[0].image.height));
      continue;
    }
    const auto id = parse_frame_number(files[i].filename().string());
    frames.push_back({id ? *id : static_cast<int>(i + 1), std::move(img)});
  }
  return frames;
}

SilhouetteSequence read_silhouette_folder(const fs::path& dir, SilReadStats& stats) {
  SilhouetteSequence seq;
  for (const RawFrame& f : read_frame_images(dir, stats)) {
    const auto r = preprocess_silhouette(f.image);
    if (!r.frame) {
      ++(r.dropped == DropReason::NearEmpty ? stats.near_empty : stats.no_centre);
      continue;
    }
    seq.frame_ids.push_back(f.frame_id);
    seq.pixels.insert(seq.pixels.end(), r.frame->begin(), r.frame->end());
    ++stats.used;
  }
  return seq;
}

}  // namespace gait
