#include "gait/eval/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "common/files.hpp"
#include "common/plot.hpp"

namespace gait::eval {

namespace fs = std::filesystem;
using common::plot::Color;

namespace {

std::string cell(double v, int width, int prec) {
  return std::isnan(v) ? fmt::format("{:>{}}", "-", width) : fmt::format("{:>{}.{}f}", v, width, prec);
}

// A perceptually ordered map (viridis anchors) from [0, 1] to RGB.
Color colormap(double u) {
  static constexpr std::array<std::array<double, 3>, 5> kAnchors = {
      {{68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}}};
  u = std::clamp(u, 0.0, 1.0) * (kAnchors.size() - 1);
  const auto i = std::min<std::size_t>(static_cast<std::size_t>(u), kAnchors.size() - 2);
  const double f = u - static_cast<double>(i);
  auto mix = [&](int c) { return static_cast<std::uint8_t>(std::lround(kAnchors[i][c] * (1 - f) + kAnchors[i + 1][c] * f)); };
  return {mix(0), mix(1), mix(2)};
}

void fill(common::Image& img, int x0, int y0, int x1, int y1, Color c) {
  for (int y = std::max(0, y0); y < std::min(img.height, y1); ++y)
    for (int x = std::max(0, x0); x < std::min(img.width, x1); ++x) {
      img.at(y, x, 0) = c.r;
      img.at(y, x, 1) = c.g;
      img.at(y, x, 2) = c.b;
    }
}

}  // namespace

std::string format_rank1_table(const Rank1Result& r) {
  std::string s = "CASIA-B rank-1 accuracy (%), gallery nm-01..04, identical views excluded\n";
  s += fmt::format("{:<6}", "probe");
  for (int v : r.views) s += fmt::format(" {:>6}", view_name(v));
  s += fmt::format(" {:>7}\n", "mean");
  for (std::size_t i = 0; i < kProbeSets.size(); ++i) {
    s += fmt::format("{:<6}", probe_set_name(kProbeSets[i]));
    for (double v : r.per_view[i]) s += fmt::format(" {}", cell(v, 6, 1));
    s += fmt::format(" {}\n", cell(r.mean[i], 7, 2));
  }
  s += fmt::format("({} gallery sequences; probes NM {}, BG {}, CL {})\n", r.gallery, r.probes[0], r.probes[1],
                   r.probes[2]);
  return s;
}

void write_rank1_csv(const fs::path& dir, const Rank1Result& r) {
  fs::create_directories(dir);
  std::string per_view = "set,probe_view,rank1\n", matrix = "set,probe_view,gallery_view,accuracy\n",
              summary = "set,mean_rank1,probes,gallery\n";
  auto num = [](double v) { return std::isnan(v) ? std::string("nan") : fmt::format("{:.4f}", v); };
  for (std::size_t i = 0; i < kProbeSets.size(); ++i) {
    const char* name = probe_set_name(kProbeSets[i]);
    for (std::size_t a = 0; a < r.views.size(); ++a) {
      per_view += fmt::format("{},{},{}\n", name, r.views[a], num(r.per_view[i][a]));
      for (std::size_t b = 0; b < r.views.size(); ++b)
        matrix += fmt::format("{},{},{},{}\n", name, r.views[a], r.views[b], num(r.acc[i][a][b]));
    }
    summary += fmt::format("{},{},{},{}\n", name, num(r.mean[i]), r.probes[i], r.gallery);
  }
  common::write_file_atomic(dir / "rank1_per_view.csv", per_view);
  common::write_file_atomic(dir / "rank1_matrix.csv", matrix);
  common::write_file_atomic(dir / "rank1_summary.csv", summary);
}

common::Image render_rank1_heatmap(const Rank1Result& r, const std::string& title) {
  using common::plot::draw_text;
  using common::plot::text_height;
  using common::plot::text_width;
  const int nv = static_cast<int>(r.views.size());
  const int cw = 34, ch = 20, label_w = 30, label_h = 16, gap = 28, margin = 16, title_h = 26, panel_title_h = 16;
  const int axis_w = 14;  // room for the vertical "probe view" label
  const int panel_w = label_w + nv * cw, panel_h = label_h + nv * ch;
  const int width = margin + axis_w + 3 * panel_w + 2 * gap + margin;
  const int legend_h = 40;
  const int height = margin + title_h + panel_title_h + panel_h + 18 + legend_h + margin;
  common::Image img = common::Image::blank(width, height, 3, 255);
  const Color black{0, 0, 0}, white{255, 255, 255}, grey{200, 200, 200};
  draw_text(img, margin, margin, title, black, 2);
  draw_text(img, margin, margin + title_h + panel_title_h + label_h + nv * ch / 2 + text_width("probe view", 1) / 2,
            "probe view", black, 1, true);
  for (std::size_t s = 0; s < kProbeSets.size(); ++s) {
    const int x0 = margin + axis_w + static_cast<int>(s) * (panel_w + gap), y0 = margin + title_h;
    draw_text(img, x0 + label_w, y0, fmt::format("{} probes: mean {:.2f}%", probe_set_name(kProbeSets[s]), r.mean[s]),
              black, 1);
    const int gy = y0 + panel_title_h + label_h, gx = x0 + label_w;
    for (int b = 0; b < nv; ++b) {
      const std::string t = view_name(r.views[b]);
      draw_text(img, gx + b * cw + (cw - text_width(t, 1)) / 2, gy - label_h + 3, t, black, 1);
    }
    for (int a = 0; a < nv; ++a) {
      const std::string t = view_name(r.views[a]);
      draw_text(img, x0 + label_w - 4 - text_width(t, 1), gy + a * ch + (ch - text_height(1)) / 2, t, black, 1);
      for (int b = 0; b < nv; ++b) {
        const double v = r.acc[s][a][b];
        const int cx = gx + b * cw, cy = gy + a * ch;
        const bool excluded = a == b || std::isnan(v);
        const Color bg = excluded ? grey : colormap(v / 100.0);
        fill(img, cx, cy, cx + cw - 1, cy + ch - 1, bg);
        const std::string txt = std::isnan(v) ? "-" : fmt::format("{:.0f}", v);
        const Color fg = excluded ? Color{90, 90, 90} : (v > 60 ? black : white);
        draw_text(img, cx + (cw - 1 - text_width(txt, 1)) / 2, cy + (ch - 1 - text_height(1)) / 2, txt, fg, 1);
      }
    }
    draw_text(img, gx + (nv * cw - text_width("gallery view", 1)) / 2, gy + nv * ch + 4, "gallery view", black, 1);
  }
  // Colour scale.
  const int ly = height - margin - legend_h + 8, lx = margin + axis_w + label_w, lw = 300;
  for (int x = 0; x < lw; ++x) fill(img, lx + x, ly, lx + x + 1, ly + 12, colormap(static_cast<double>(x) / (lw - 1)));
  for (int v : {0, 25, 50, 75, 100}) {
    const std::string t = fmt::format("{}%", v);
    draw_text(img, lx + v * (lw - 1) / 100 - text_width(t, 1) / 2, ly + 16, t, black, 1);
  }
  draw_text(img, lx + lw + 12, ly + 2, "rank-1 accuracy per (probe view, gallery view); grey: excluded", black, 1);
  return img;
}

void write_rank1_heatmap(const fs::path& png, const Rank1Result& r, const std::string& title) {
  common::write_png(render_rank1_heatmap(r, title), png);
}

nlohmann::json rank1_json(const Rank1Result& r) {
  auto num = [](double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(std::round(v * 100) / 100); };
  nlohmann::json j;
  j["views"] = r.views;
  j["gallery"] = r.gallery;
  for (std::size_t s = 0; s < kProbeSets.size(); ++s) {
    nlohmann::json e;
    e["mean"] = num(r.mean[s]);
    e["probes"] = r.probes[s];
    for (double v : r.per_view[s]) e["per_view"].push_back(num(v));
    j[probe_set_name(kProbeSets[s])] = e;
  }
  return j;
}

}  // namespace gait::eval
