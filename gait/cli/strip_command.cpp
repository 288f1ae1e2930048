// gait strip ROOT --subject N [--views 36,90,144] --out FILE.png
//   One subject under NM, BG and CL (nm-01, bg-01, cl-01; rows) at the chosen views
//   (columns): the raw silhouette around the person, the pose CSV's skeleton drawn
//   over it (left limbs orange, right limbs blue, joints under kVisibleConf hollow grey).
// gait strip ROOT --subject N --walk VIEW [--sequence nm-01] [--count 8] --out FILE.png
//   Successive frames of one sequence in a row (every `--every` frames).
// Everything is read back through the dataset readers, so the strip shows what a user
// of the files gets.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <optional>

#include "commands.hpp"
#include "common/check.hpp"
#include "common/files.hpp"
#include "common/validate.hpp"
#include "common/png.hpp"
#include "draw.hpp"
#include "gait/dataset.hpp"
#include "gait/silhouettes.hpp"
#include "gait/synth/generator.hpp"

namespace gait::cli {

namespace fs = std::filesystem;

namespace {

constexpr int kTileW = 96, kTileH = 150;  // px: a 125 px walker with room for a bag
constexpr Rgb kLeft{255, 140, 0}, kRight{40, 120, 255}, kCentre{60, 200, 80}, kFaint{150, 150, 150};

struct StripArgs {
  fs::path root, out;
  int subject = 1;
  std::vector<int> views{36, 90, 144};
  std::optional<int> walk_view;  // empty: the NM/BG/CL grid
  int count = 8, every = 3;
  std::string sequence = "nm-01";
};

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
  const int x0 = cx - kTileW / 2, y0 = cy - kTileH / 2;
  for (int y = 0; y < kTileH; ++y)
    for (int x = 0; x < kTileW; ++x) {
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
    draw_line(canvas, tx(p.x), ty(p.y), tx(q.x), ty(q.y), faint ? 1.0 : 1.6, faint ? kFaint : limb_colour(a, b));
  }
  for (int j = 0; j < kCocoJoints; ++j) {
    const Keypoint& k = (*pose)[j];
    if (k.conf <= 0) continue;
    draw_dot(canvas, tx(k.x), ty(k.y), 1.8, k.conf < kVisibleConf ? kFaint : Rgb{230, 30, 30});
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

void run_strip(const StripArgs& a) {
  common::check_output_path(a.out, "strip: --out");
  const DatasetIndex idx = scan_dataset(resolve_dataset(a.root));
  std::vector<std::pair<SequenceKey, int>> tiles;  // key, frame index (-1: middle)
  int cols = 0, rows = 0;
  if (a.walk_view) {
    const auto sd = parse_seq_dir(a.sequence);
    XS_ASSERT(sd.has_value(), "--sequence must look like nm-01 (got '{}')", a.sequence);
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
  constexpr int kGap = 4;
  common::Image canvas = common::Image::blank(cols * kTileW + (cols + 1) * kGap, rows * kTileH + (rows + 1) * kGap, 3, 255);
  for (std::size_t i = 0; i < tiles.size(); ++i) {
    const auto& [key, which] = tiles[i];
    const SeqData d = load_seq(idx, key);
    // The middle frame that has a pose row, else the middle frame.
    int t = which >= 0 ? which : static_cast<int>(d.pngs.size()) / 2;
    if (which < 0)
      for (int k = 0; k < static_cast<int>(d.pngs.size()) / 2 && !d.pose_at(d.frames[t]); ++k) ++t;
    const int col = static_cast<int>(i) % cols, row = static_cast<int>(i) / cols;
    draw_tile(canvas, kGap + col * (kTileW + kGap), kGap + row * (kTileH + kGap), d.pngs[t], d.pose_at(d.frames[t]));
  }
  const auto bytes = common::encode_png(canvas);
  common::write_file_atomic(a.out, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  fmt::print("{}: {}x{} ({} tiles, {:.1f} KB)\n", a.out.string(), canvas.width, canvas.height, tiles.size(), bytes.size() / 1024.0);
}

}  // namespace

void add_strip_command(CLI::App& app) {
  auto* a = new StripArgs;
  auto* cmd = app.add_subcommand("strip", "Draw one subject's silhouettes with the skeleton over them (PNG)");
  cmd->add_option("root", a->root, "Dataset root (a gait synth output)")
      ->required()
      ->check(common::validate::existing_folder());
  cmd->add_option("--subject", a->subject, "Subject id")->check(common::validate::range(1, 999, "subject id"));
  cmd->add_option("--views", a->views, "Views (columns) for the NM/BG/CL grid")
      ->delimiter(',')
      ->check(common::validate::range(0, 359, "degrees"));
  cmd->add_option("--walk", a->walk_view, "Instead: successive frames of one sequence at this view")
      ->check(common::validate::range(0, 359, "degrees"));
  cmd->add_option("--sequence", a->sequence, "Sequence for --walk, e.g. nm-01");
  cmd->add_option("--count", a->count, "Frames for --walk")->check(common::validate::range(1, 1000, "frames"));
  cmd->add_option("--every", a->every, "Frame step for --walk")->check(common::validate::range(1, 1000, "frames"));
  cmd->add_option("--out", a->out, "Output PNG")->required();
  cmd->callback([a] {
    common::validate::unique<int>(a->views, "--views");
    run_strip(*a);
  });
}

}  // namespace gait::cli
