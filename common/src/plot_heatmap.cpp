// Heatmaps for common/plot.hpp, drawn by PLplot: panels of filled cells with their
// values written in, row and column labels, and PLplot's colour bar for the scale.
// Placement is in pixels (plot_session.hpp's pixel world); cell colours come from
// PLplot's colour map 1, loaded with sequential().
#include <fmt/format.h>
#include <plplot/plplot.h>

#include <algorithm>
#include <cmath>

#include "common/check.hpp"
#include "common/plot.hpp"
#include "plot_session.hpp"

namespace common::plot {

namespace {

using namespace detail;

struct HeatLayout {
  double cap = 0, cell_cap = 0, margin = 0, gap = 0;
  int cell_w = 0, cell_h = 0, row_label_w = 0, grid_top = 0;
  std::vector<int> panel_x;  // left edge of each panel's first column
  int bar_x = 0, bar_y = 0, bar_w = 0, bar_h = 0;
  int width = 0, height = 0;
  double line() const { return 1.45 * cap; }
};

void validate(const Heatmap& h) {
  XS_ASSERT(h.text_scale >= 1 && h.text_scale <= 8, "heatmap text_scale {} outside 1..8", h.text_scale);
  XS_ASSERT(!h.panels.empty() && !h.rows.empty() && !h.columns.empty(), "heatmap '{}' has no cells", h.title);
  XS_ASSERT(std::isfinite(h.lo) && std::isfinite(h.hi) && h.lo < h.hi, "heatmap '{}': bad colour range [{}, {}]",
            h.title, h.lo, h.hi);
  for (const HeatmapPanel& p : h.panels) {
    XS_ASSERT(p.values.size() == h.rows.size(), "heatmap panel '{}': {} rows of values for {} row labels", p.title,
              p.values.size(), h.rows.size());
    XS_ASSERT(p.muted.empty() || p.muted.size() == h.rows.size(), "heatmap panel '{}': muted has {} rows, not {}",
              p.title, p.muted.size(), h.rows.size());
    for (std::size_t r = 0; r < h.rows.size(); ++r) {
      XS_ASSERT(p.values[r].size() == h.columns.size(), "heatmap panel '{}': row {} has {} values for {} columns",
                p.title, r, p.values[r].size(), h.columns.size());
      XS_ASSERT(p.muted.empty() || p.muted[r].size() == h.columns.size(),
                "heatmap panel '{}': muted row {} has {} entries, not {}", p.title, r, p.muted[r].size(),
                h.columns.size());
    }
  }
}

HeatLayout make_layout(const Heatmap& h) {
  validate(h);
  HeatLayout L;
  L.cap = 5.5 * h.text_scale;
  L.cell_cap = 0.85 * L.cap;
  L.margin = 1.5 * L.cap;
  L.gap = 0.75 * L.cap;
  double row_w = 0, col_w = 0;
  for (const auto& s : h.rows) row_w = std::max(row_w, text_width_estimate(s, L.cap));
  for (const auto& s : h.columns) col_w = std::max(col_w, text_width_estimate(s, L.cap));
  L.row_label_w = static_cast<int>(std::ceil(row_w + L.gap));
  const int ncols = static_cast<int>(h.columns.size()), nrows = static_cast<int>(h.rows.size());
  const int npanels = static_cast<int>(h.panels.size());
  const double left = L.margin + (h.y_label.empty() ? 0 : L.line() + L.gap);
  const double panel_gap = 2 * L.cap;
  const double fixed_w = left + npanels * L.row_label_w + (npanels - 1) * panel_gap + L.margin;
  const double top = L.margin + (h.title.empty() ? 0 : 1.3 * 6.5 * h.text_scale + L.gap);
  L.grid_top = static_cast<int>(top + 2 * L.line() + 0.3 * L.gap);
  const double fixed_h = L.grid_top + L.line() + 0.5 * L.gap + 2.0 * L.gap + 1.3 * L.cap + L.gap + L.line() + L.margin;
  L.cell_w = static_cast<int>(std::ceil(std::max({3.8 * L.cap, col_w + L.cap, 3.5 * L.cell_cap})));
  L.cell_h = static_cast<int>(std::ceil(2.3 * L.cap));
  L.width = h.width > 0 ? h.width : static_cast<int>(std::ceil(fixed_w + npanels * ncols * L.cell_w));
  L.height = h.height > 0 ? h.height : static_cast<int>(std::ceil(fixed_h + nrows * L.cell_h));
  XS_ASSERT(L.width >= 64 && L.height >= 64 && L.width <= 16384 && L.height <= 16384,
            "heatmap size {}x{} outside 64..16384 pixels", L.width, L.height);
  L.cell_w = static_cast<int>((L.width - fixed_w) / (npanels * ncols));  // stretch to a given size
  L.cell_h = static_cast<int>((L.height - fixed_h) / nrows);
  XS_ASSERT(L.cell_w >= 8 && L.cell_h >= 8, "heatmap {}x{} is too small for {} panels of {}x{} cells", L.width,
            L.height, npanels, nrows, ncols);
  for (int p = 0; p < npanels; ++p)
    L.panel_x.push_back(static_cast<int>(left + L.row_label_w + p * (L.row_label_w + ncols * L.cell_w + panel_gap)));
  L.bar_x = L.panel_x.front();
  L.bar_y = static_cast<int>(L.grid_top + nrows * L.cell_h + L.line() + 2.5 * L.gap);
  L.bar_w = std::clamp(ncols * L.cell_w, 200, std::max(200, L.width / 3));
  L.bar_h = static_cast<int>(1.3 * L.cap);
  return L;
}

void fill_rect(double x0, double y0, double x1, double y1) {
  const PLFLT xs[4] = {x0, x1, x1, x0}, ys[4] = {y0, y0, y1, y1};
  plfill(4, xs, ys);
}

// One panel: title, column labels above, row labels left, cells, x label below.
void draw_panel(const Heatmap& h, const HeatmapPanel& p, const HeatLayout& L, int x0, bool first) {
  const int ncols = static_cast<int>(h.columns.size()), nrows = static_cast<int>(h.rows.size());
  const double span = h.hi - h.lo;
  plcol0(kInk);
  set_text(L.cap, /*bold=*/true);
  text(x0 + ncols * L.cell_w / 2.0, L.grid_top - 1.5 * L.line() - 0.3 * L.gap, p.title, 0.5);
  set_text(L.cap);
  for (int c = 0; c < ncols; ++c) text(x0 + (c + 0.5) * L.cell_w, L.grid_top - 0.5 * L.line(), h.columns[c], 0.5);
  for (int r = 0; r < nrows; ++r) text(x0 - L.gap, L.grid_top + (r + 0.5) * L.cell_h, h.rows[r], 1.0);
  text(x0 + ncols * L.cell_w / 2.0, L.grid_top + nrows * L.cell_h + 0.5 * L.gap + L.cap / 2, h.x_label, 0.5);
  if (first)
    text(L.margin + 0.3 * L.cap + L.cap / 2, L.grid_top + nrows * L.cell_h / 2.0, h.y_label, 0.5, /*vertical=*/true);
  for (int r = 0; r < nrows; ++r)
    for (int c = 0; c < ncols; ++c) {
      const double v = p.values[r][c];
      const bool muted = std::isnan(v) || (!p.muted.empty() && p.muted[r][c]);
      const double t = std::clamp((v - h.lo) / span, 0.0, 1.0);
      const double cx = x0 + c * L.cell_w, cy = L.grid_top + r * L.cell_h;
      if (muted) plcol0(kMuted);
      else plcol1(t);
      fill_rect(cx, cy, cx + L.cell_w - 1, cy + L.cell_h - 1);  // a one-pixel white seam between cells
      if (!h.cell_text) continue;
      const Color bg = sequential(t);
      plcol0(muted ? kMutedInk : 0.299 * bg.r + 0.587 * bg.g + 0.114 * bg.b > 140 ? kInk : kWhite);
      set_text(L.cell_cap);
      text(cx + (L.cell_w - 1) / 2.0, cy + (L.cell_h - 1) / 2.0, std::isnan(v) ? "-" : h.cell_text(v), 0.5);
    }
}

// PLplot's colour bar (a gradient with a numbered axis under it), the caption to its right.
void draw_colour_bar(const Heatmap& h, const HeatLayout& L) {
  plvpor(static_cast<double>(L.bar_x) / L.width, static_cast<double>(L.bar_x + L.bar_w) / L.width,
         1.0 - static_cast<double>(L.bar_y + L.bar_h) / L.height, 1.0 - static_cast<double>(L.bar_y) / L.height);
  plwind(0, 1, 0, 1);
  set_text(L.cap);
  plcol0(kFrame);
  plwidth(1.0);
  const char* axis_opts[1] = {"bcnt"};  // numbered major ticks under the bar
  plsmaj(0.25 * L.bar_h * 25.4 / 72, 1.0);  // ticks a quarter of the bar high (mm at 72 dpi)
  const PLFLT ticks[1] = {0.0};
  const PLINT sub_ticks[1] = {0}, n_values[1] = {2};
  const PLFLT range[2] = {h.lo, h.hi};
  const PLFLT* values[1] = {range};
  PLFLT w = 0, hh = 0;
  plcolorbar(&w, &hh, PL_COLORBAR_GRADIENT | PL_COLORBAR_ORIENT_RIGHT, PL_POSITION_VIEWPORT | PL_POSITION_INSIDE |
             PL_POSITION_LEFT | PL_POSITION_TOP, 0, 0, 1, 1, kWhite, kFrame, 1, 0, 0, 0, 0, 0, nullptr, nullptr, 1,
             axis_opts, ticks, sub_ticks, n_values, values);
  pixel_world(L.width, L.height);
  plcol0(kInk);
  text(L.bar_x + L.bar_w + 1.5 * L.cap, L.bar_y + L.bar_h / 2.0, h.scale_label, 0.0);
}

void draw_heatmap(const Heatmap& h, const HeatLayout& L) {
  constexpr int kLevels = 256;
  PLINT r[kLevels], g[kLevels], b[kLevels];
  for (int i = 0; i < kLevels; ++i) {
    const Color c = sequential(static_cast<double>(i) / (kLevels - 1));
    r[i] = c.r;
    g[i] = c.g;
    b[i] = c.b;
  }
  plscmap1(r, g, b, kLevels);
  pixel_world(L.width, L.height);
  if (!h.title.empty()) {
    const double title_cap = 6.5 * h.text_scale;
    set_text(title_cap, /*bold=*/true);
    plcol0(kInk);
    text(L.margin, L.margin + title_cap / 2, h.title, 0.0);
  }
  for (std::size_t p = 0; p < h.panels.size(); ++p) draw_panel(h, h.panels[p], L, L.panel_x[p], p == 0);
  draw_colour_bar(h, L);
}

}  // namespace

Image render(const Heatmap& heatmap) {
  const HeatLayout L = make_layout(heatmap);
  return draw_to_image(L.width, L.height, kFirstFree, [&] { draw_heatmap(heatmap, L); });
}

void write_heatmap(const Heatmap& heatmap, const std::filesystem::path& path) {
  const HeatLayout L = make_layout(heatmap);
  draw_to_png(L.width, L.height, kFirstFree, path, [&] { draw_heatmap(heatmap, L); });
}

}  // namespace common::plot
