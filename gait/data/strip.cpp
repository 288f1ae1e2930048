// render_strip (gait/strip.hpp): everything is read back through the dataset readers,
// so a strip shows what a user of the files gets.
#include "gait/strip.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "common/check.hpp"
#include "draw.hpp"
#include "gait/silhouettes.hpp"
#include "gait/synth/generator.hpp"

namespace gait {

namespace fs = std::filesystem;
using detail::Rgb;

namespace {

constexpr Rgb kLeft{255, 140, 0}, kRight{40, 120, 255}, kCentre{60, 200, 80}, kFaint{150, 150, 150};

Rgb limb_colour(int a, int b) {
  auto side = [](int j) { return j == 0 ? 0 : (j % 2 == 1 ? -1 : 1); };  // COCO: odd = left
  const int s = side(a) + side(b);
  return s < 0 ? kLeft : s > 0 ? kRight : kCentre;
}

// Draws frame `t` of a sequence into the tile at (ox, oy); the crop follows the person.
void draw_tile(common::Image& canvas, int ox, int oy, const fs::path& png, const PoseFrame* pose) {
  const common::Image sil = common::read_png(png, 1);
  const auto ext = vertical_extent(sil);
  int cx = sil.width / 2, cy = sil.height / 2;
  if (ext) {
    long long sx = 0, n = 0;
    for (int y = ext->first; y <= ext->second; ++y)
      for (int x = 0; x < sil.width; ++x)
        if (sil.at(y, x)) sx += x, ++n;
    cx = n ? static_cast<int>(sx / n) : cx;
    cy = (ext->first + ext->second) / 2;
  }
  const int x0 = cx - kStripTileW / 2, y0 = cy - kStripTileH / 2;
  for (int y = 0; y < kStripTileH; ++y)
    for (int x = 0; x < kStripTileW; ++x) {
      const int sx = x0 + x, sy = y0 + y;
      const std::uint8_t v = (sx >= 0 && sy >= 0 && sx < sil.width && sy < sil.height) ? sil.at(sy, sx) : 0;
      for (int k = 0; k < 3; ++k) canvas.at(oy + y, ox + x, k) = v ? 235 : 25;
    }
  if (!pose) return;
  auto tx = [&](float x) { return ox + (x - x0); };
  auto ty = [&](float y) { return oy + (y - y0); };
  for (auto [a, b] : kCocoBones) {
    const Keypoint &p = (*pose)[a], &q = (*pose)[b];
    if (p.conf <= 0 || q.conf <= 0) continue;
    const bool faint = p.conf < kVisibleConf || q.conf < kVisibleConf;
    detail::draw_line(canvas, tx(p.x), ty(p.y), tx(q.x), ty(q.y), faint ? 1.0 : 1.6,
                      faint ? kFaint : limb_colour(a, b));
  }
  for (int j = 0; j < kCocoJoints; ++j) {
    const Keypoint& k = (*pose)[j];
    if (k.conf <= 0) continue;
    detail::draw_dot(canvas, tx(k.x), ty(k.y), 1.8, k.conf < kVisibleConf ? kFaint : Rgb{230, 30, 30});
  }
}

struct SeqData {
  std::vector<fs::path> pngs;
  std::vector<int> frames;
  const PoseSequence* pose = nullptr;
  const PoseFrame* pose_at(int frame) const {
    if (!pose) return nullptr;
    auto it = std::lower_bound(pose->frame_ids.begin(), pose->frame_ids.end(), frame);
    return (it != pose->frame_ids.end() && *it == frame) ? &pose->frames[it - pose->frame_ids.begin()] : nullptr;
  }
};

SeqData load_seq(const DatasetIndex& idx, const SequenceKey& key) {
  SeqData d;
  const fs::path dir = idx.paths.silhouettes / subject_name(key.subject) / seq_dir_name(key) / view_name(key.view);
  SilReadStats stats;
  d.pngs = list_frame_files(dir, stats);
  XS_ASSERT(!d.pngs.empty(), "{}: no frames to draw", dir.string());
  for (std::size_t i = 0; i < d.pngs.size(); ++i) {
    const auto f = parse_frame_number(d.pngs[i].filename().string());
    d.frames.push_back(f ? *f : static_cast<int>(i + 1));
  }
  if (auto it = idx.poses.find(key); it != idx.poses.end()) d.pose = &it->second;
  return d;
}

}  // namespace

common::Image render_strip(const DatasetIndex& idx, const StripSpec& a) {
  std::vector<std::pair<SequenceKey, int>> tiles;  // key, frame index (-1: middle)
  int cols = 0, rows = 0;
  if (a.walk_view) {
    const auto sd = parse_seq_dir(a.sequence);
    if (!sd) throw common::Error(fmt::format("strip: the sequence must look like nm-01 (got '{}')", a.sequence));
    const SequenceKey key{a.subject, sd->first, sd->second, *a.walk_view};
    const SeqData d = load_seq(idx, key);
    const int start = std::max(0, static_cast<int>(d.pngs.size()) / 2 - a.count * a.every / 2);
    for (int i = 0; i < a.count; ++i) tiles.emplace_back(key, std::min<int>(start + i * a.every, d.pngs.size() - 1));
    cols = a.count;
    rows = 1;
  } else {
    for (Condition c : kConditions)
      for (int v : a.views) tiles.emplace_back(SequenceKey{a.subject, c, 1, v}, -1);
    cols = static_cast<int>(a.views.size());
    rows = 3;
  }
  const int width = cols * kStripTileW + (cols + 1) * kStripGap, height = rows * kStripTileH + (rows + 1) * kStripGap;
  common::Image canvas = common::Image::blank(width, height, 3, 255);
  for (std::size_t i = 0; i < tiles.size(); ++i) {
    const auto& [key, which] = tiles[i];
    const SeqData d = load_seq(idx, key);
    // The middle frame that has a pose row, else the middle frame.
    int t = which >= 0 ? which : static_cast<int>(d.pngs.size()) / 2;
    if (which < 0)
      for (int k = 0; k < static_cast<int>(d.pngs.size()) / 2 && !d.pose_at(d.frames[t]); ++k) ++t;
    const int col = static_cast<int>(i) % cols, row = static_cast<int>(i) / cols;
    const int ox = kStripGap + col * (kStripTileW + kStripGap), oy = kStripGap + row * (kStripTileH + kStripGap);
    draw_tile(canvas, ox, oy, d.pngs[t], d.pose_at(d.frames[t]));
  }
  return canvas;
}

}  // namespace gait
