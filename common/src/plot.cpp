// Charts for common/plot.hpp, drawn by PLplot (see plot_session.hpp for streams,
// locking and atomic output).
//
// Our part: validate the data, fix each axis range and its ticks (nice_ticks and
// format_tick, or the caller's), size the margins in pixels, pick the legend corner.
// PLplot's part: the drawing. Everything is placed in pixels: annotations (grid,
// frame, ticks, text) on the whole page, series in the plot rectangle with a world
// of pixels too, so PLplot clips lines and markers to the frame.
#include "common/plot.hpp"

#include <fmt/format.h>
#include <plplot/plplot.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "common/check.hpp"
#include "plot_session.hpp"

namespace common::plot {

namespace {

using namespace detail;

// ---------------------------------------------------------------- axes

double to_axis(Scale s, double v) { return s == Scale::log10 ? std::log10(v) : v; }
double from_axis(Scale s, double v) { return s == Scale::log10 ? std::pow(10.0, v) : v; }

struct AxisPlan {
  double lo = 0, hi = 1;  // data units
  std::vector<double> major, minor;
  std::vector<std::string> labels;
};

AxisPlan plan_axis(const Axis& axis, const std::vector<double>& values, const char* name) {
  const bool log = axis.scale == Scale::log10;
  for (double v : values) {
    XS_ASSERT(!log || v > 0, "{} axis is log10 but the data has the non-positive value {}", name, v);
  }
  AxisPlan p;
  if (axis.min) XS_ASSERT(std::isfinite(*axis.min) && (!log || *axis.min > 0), "{} axis: bad minimum {}", name, *axis.min);
  if (axis.max) XS_ASSERT(std::isfinite(*axis.max) && (!log || *axis.max > 0), "{} axis: bad maximum {}", name, *axis.max);
  double lo, hi;
  if (values.empty()) {
    lo = log ? 1.0 : 0.0;
    hi = log ? 10.0 : 1.0;
  } else {
    lo = *std::min_element(values.begin(), values.end());
    hi = *std::max_element(values.begin(), values.end());
  }
  if (!log && axis.include_zero) {
    lo = std::min(lo, 0.0);
    hi = std::max(hi, 0.0);
  }
  // Pad by 5% of the span (in axis space) unless the bound is pinned.
  double a = to_axis(axis.scale, lo), b = to_axis(axis.scale, hi);
  if (b - a < 1e-12 * std::max(1.0, std::abs(a))) {
    const double half = log ? 0.5 : std::max(std::abs(a) * 0.5, 0.5);
    a -= half;
    b += half;
  } else {
    const double pad = 0.05 * (b - a);
    if (!(!log && axis.include_zero && lo == 0.0)) a -= pad;
    if (!(!log && axis.include_zero && hi == 0.0)) b += pad;
  }
  p.lo = axis.min ? *axis.min : from_axis(axis.scale, a);
  p.hi = axis.max ? *axis.max : from_axis(axis.scale, b);
  XS_ASSERT(p.lo < p.hi, "{} axis: minimum {} is not below maximum {}", name, p.lo, p.hi);

  const double eps = 1e-9 * (to_axis(axis.scale, p.hi) - to_axis(axis.scale, p.lo));
  auto inside = [&](double v) {
    const double t = to_axis(axis.scale, v);
    return t >= to_axis(axis.scale, p.lo) - eps && t <= to_axis(axis.scale, p.hi) + eps;
  };
  for (double t : axis.ticks.empty() ? nice_ticks(p.lo, p.hi, axis.scale) : axis.ticks) {
    if ((!log || t > 0) && std::isfinite(t) && inside(t)) p.major.push_back(t);
  }
  if (log) {
    const double span = std::log10(p.hi) - std::log10(p.lo);
    if (span <= 8) {
      for (int d = static_cast<int>(std::floor(std::log10(p.lo))); d <= static_cast<int>(std::ceil(std::log10(p.hi))); ++d)
        for (int m = 2; m <= 9; ++m) {
          const double v = m * std::pow(10.0, d);
          if (inside(v)) p.minor.push_back(v);
        }
    }
  }
  for (double t : p.major) p.labels.push_back(axis.tick_format ? axis.tick_format(t) : format_tick(t));
  return p;
}

}  // namespace

// ---------------------------------------------------------------- layout

namespace {

// Sizes in pixels for a text scale.
struct Metrics {
  double cap, title_cap, margin, gap, tick;
  explicit Metrics(int text_scale)
      : cap(5.5 * text_scale), title_cap(6.5 * text_scale), margin(1.5 * cap), gap(0.75 * cap), tick(5) {}
  double line() const { return 1.45 * cap; }  // a line of text with its descenders
};

struct Plan {
  Frame frame;
  AxisPlan xa, ya;
  int width = 0, height = 0;
};

void check_frame(const Chart& chart, const Frame& f) {
  XS_ASSERT(f.right - f.left >= 40 && f.bottom - f.top >= 40,
            "chart {}x{} is too small for its labels (plot area {}x{})", chart.width, chart.height, f.right - f.left,
            f.bottom - f.top);
}

void validate(const Chart& chart, std::vector<double>& xs, std::vector<double>& ys) {
  XS_ASSERT(chart.text_scale >= 1 && chart.text_scale <= 8, "chart text_scale {} outside 1..8", chart.text_scale);
  XS_ASSERT(chart.width >= 64 && chart.height >= 64 && chart.width <= 16384 && chart.height <= 16384,
            "chart size {}x{} outside 64..16384 pixels", chart.width, chart.height);
  for (const auto& s : chart.series) {
    XS_ASSERT(s.x.size() == s.y.size(), "series '{}': {} x values but {} y values", s.label, s.x.size(), s.y.size());
    XS_ASSERT(s.line_width > 0 && s.line_width < 50 && s.marker_radius >= 0 && s.marker_radius < 50,
              "series '{}': bad line width or marker radius", s.label);
    for (std::size_t i = 0; i < s.x.size(); ++i) {
      XS_ASSERT(std::isfinite(s.x[i]) && std::isfinite(s.y[i]), "series '{}': point {} is not finite ({}, {})",
                s.label, i, s.x[i], s.y[i]);
      if (chart.x.scale == Scale::log10)
        XS_ASSERT(s.x[i] > 0, "series '{}': x axis is log10 but point {} has x = {}", s.label, i, s.x[i]);
      if (chart.y.scale == Scale::log10)
        XS_ASSERT(s.y[i] > 0, "series '{}': y axis is log10 but point {} has y = {}", s.label, i, s.y[i]);
      xs.push_back(s.x[i]);
      ys.push_back(s.y[i]);
    }
  }
}

// Validates the chart and places the plot rectangle; an outside legend's width is
// only known once PLplot drew it (draw_chart() then moves the right edge).
Plan make_plan(const Chart& chart) {
  std::vector<double> xs, ys;
  validate(chart, xs, ys);
  Plan p;
  p.width = chart.width;
  p.height = chart.height;
  p.xa = plan_axis(chart.x, xs, "x");
  p.ya = plan_axis(chart.y, ys, "y");

  const Metrics mt(chart.text_scale);
  double ytw = 0;
  for (const auto& l : p.ya.labels) ytw = std::max(ytw, text_width_estimate(l, mt.cap));
  Frame& f = p.frame;
  f.top = static_cast<int>(mt.margin + (chart.title.empty() ? 0 : 1.3 * mt.title_cap + mt.gap) + mt.cap);
  f.left = static_cast<int>(mt.margin + (chart.y.label.empty() ? 0 : mt.line() + mt.gap) + ytw + mt.tick + mt.gap);
  const double last_half = p.xa.labels.empty() ? 0 : text_width_estimate(p.xa.labels.back(), mt.cap) / 2;
  f.right = static_cast<int>(chart.width - mt.margin - std::max(0.0, last_half - mt.margin));
  f.bottom = static_cast<int>(chart.height - mt.margin - (chart.x.label.empty() ? 0 : mt.line() + mt.gap) -
                              mt.line() - mt.tick - mt.gap);
  check_frame(chart, f);
  f.x_scale = chart.x.scale;
  f.y_scale = chart.y.scale;
  f.x_lo = p.xa.lo;
  f.x_hi = p.xa.hi;
  f.y_lo = p.ya.lo;
  f.y_hi = p.ya.hi;
  return p;
}

// ---------------------------------------------------------------- drawing

constexpr PLINT kDashed = 3;  // PLplot line style: long dashes and gaps (also in the legend)

struct Pt {
  double x, y;
};

// Viewport = the plot rectangle, world = page pixels (y down): drawing is clipped to the frame.
void frame_world(const Frame& f, int width, int height) {
  plvpor(static_cast<double>(f.left) / width, static_cast<double>(f.right) / width,
         1.0 - static_cast<double>(f.bottom) / height, 1.0 - static_cast<double>(f.top) / height);
  plwind(f.left, f.right, f.bottom, f.top);
}

// The outline of a marker of `radius` pixels around the origin (y down).
std::vector<Pt> marker_shape(Marker m, double r) {
  std::vector<Pt> v;
  switch (m) {
    case Marker::circle:
      for (int i = 0; i < 24; ++i) v.push_back({r * std::cos(i * M_PI / 12), r * std::sin(i * M_PI / 12)});
      break;
    case Marker::square:
      v = {{-0.85 * r, -0.85 * r}, {0.85 * r, -0.85 * r}, {0.85 * r, 0.85 * r}, {-0.85 * r, 0.85 * r}};
      break;
    case Marker::diamond:
      v = {{0, -1.25 * r}, {1.25 * r, 0}, {0, 1.25 * r}, {-1.25 * r, 0}};
      break;
    case Marker::triangle:  // pointing up, circumradius 1.3 r, centred on its centroid
      for (int i = 0; i < 3; ++i) v.push_back({1.3 * r * std::sin(i * 2 * M_PI / 3), -1.3 * r * std::cos(i * 2 * M_PI / 3)});
      break;
    case Marker::cross: {  // an x of two bars, arm 1.2 r, half thickness 0.2 r + 0.6
      const double a = 1.2 * r / std::sqrt(2.0), h = (0.2 * r + 0.6) / std::sqrt(2.0);
      v = {{0, -2 * h}, {a - h, -a - h}, {a + h, -a + h}, {2 * h, 0}, {a + h, a - h}, {a - h, a + h},
           {0, 2 * h}, {-a + h, a + h}, {-a - h, a - h}, {-2 * h, 0}, {-a - h, -a + h}, {-a + h, -a - h}};
      break;
    }
    case Marker::none:
      break;
  }
  return v;
}

// The same shape as a glyph for PLplot's legend (its symbols are text).
const char* marker_glyph(Marker m) {
  switch (m) {
    case Marker::circle: return "●";
    case Marker::square: return "■";
    case Marker::diamond: return "◆";
    case Marker::triangle: return "▲";
    case Marker::cross: return "✖";
    case Marker::none: break;
  }
  return "";
}

void fill_markers(const std::vector<Pt>& at, Marker m, double radius, int slot) {
  const std::vector<Pt> shape = marker_shape(m, radius);
  if (shape.empty()) return;
  std::vector<PLFLT> xs(shape.size()), ys(shape.size());
  plcol0(slot);
  for (const Pt& p : at) {
    for (std::size_t k = 0; k < shape.size(); ++k) {
      xs[k] = p.x + shape[k].x;
      ys[k] = p.y + shape[k].y;
    }
    plfill(static_cast<PLINT>(shape.size()), xs.data(), ys.data());
  }
}

// Series in the frame: all lines first, then each series' markers over a white halo.
void draw_series(const Chart& chart, const Plan& plan, const std::vector<std::vector<Pt>>& pixels,
                 const std::vector<int>& slots) {
  frame_world(plan.frame, plan.width, plan.height);
  for (std::size_t i = 0; i < chart.series.size(); ++i) {
    const Series& s = chart.series[i];
    if (s.line == LineStyle::none || pixels[i].size() < 2) continue;
    std::vector<PLFLT> xs, ys;
    for (const Pt& p : pixels[i]) {
      xs.push_back(p.x);
      ys.push_back(p.y);
    }
    plcol0(slots[i]);
    plwidth(s.line_width);
    pllsty(s.line == LineStyle::dashed ? kDashed : 1);
    plline(static_cast<PLINT>(xs.size()), xs.data(), ys.data());
  }
  pllsty(1);
  for (std::size_t i = 0; i < chart.series.size(); ++i) {
    const Series& s = chart.series[i];
    if (s.marker == Marker::none || s.marker_radius <= 0) continue;
    fill_markers(pixels[i], s.marker, s.marker_radius + 1.5, kWhite);
    fill_markers(pixels[i], s.marker, s.marker_radius, slots[i]);
  }
}

// Pixel centre of a 1-pixel line at coordinate v: crisp instead of two half-grey columns.
double crisp(double v) { return std::floor(v) + 0.5; }

void draw_grid(const Chart& chart, const Plan& plan) {
  if (!chart.grid) return;
  const Frame& f = plan.frame;
  pixel_world(plan.width, plan.height);
  plwidth(1.0);
  for (int pass = 0; pass < 2; ++pass) {
    plcol0(pass == 0 ? kGridMinor : kGridMajor);
    for (double v : pass == 0 ? plan.xa.minor : plan.xa.major) line(crisp(f.px(v)), f.top, crisp(f.px(v)), f.bottom);
    for (double v : pass == 0 ? plan.ya.minor : plan.ya.major) line(f.left, crisp(f.py(v)), f.right, crisp(f.py(v)));
  }
}

// Frame, ticks, tick labels (skipping any that would overlap a neighbour), axis labels, title.
void draw_axes(const Chart& chart, const Plan& plan) {
  const Frame& f = plan.frame;
  const Metrics mt(chart.text_scale);
  pixel_world(plan.width, plan.height);
  plwidth(1.0);
  plcol0(kFrame);
  const double l = f.left + 0.5, r = f.right + 0.5, t = f.top + 0.5, b = f.bottom + 0.5;
  const PLFLT bx[5] = {l, r, r, l, l}, by[5] = {t, t, b, b, t};
  plline(5, bx, by);
  set_text(mt.cap);
  double prev_right = -1e9;
  for (std::size_t k = 0; k < plan.xa.major.size(); ++k) {
    const double x = crisp(f.px(plan.xa.major[k]));
    plcol0(kFrame);
    line(x, b, x, b + mt.tick);
    const double w = text_width_estimate(plan.xa.labels[k], mt.cap);
    if (x - w / 2 < prev_right + 0.5 * mt.cap) continue;
    plcol0(kInk);
    text(x, b + mt.tick + mt.gap + mt.cap / 2, plan.xa.labels[k], 0.5);
    prev_right = x + w / 2;
  }
  double prev_top = 1e9;
  for (std::size_t k = 0; k < plan.ya.major.size(); ++k) {
    const double y = crisp(f.py(plan.ya.major[k]));
    plcol0(kFrame);
    line(l - mt.tick, y, l, y);
    if (y + mt.cap / 2 > prev_top - 0.4 * mt.cap) continue;
    plcol0(kInk);
    text(l - mt.tick - mt.gap, y, plan.ya.labels[k], 1.0);
    prev_top = y - mt.cap / 2;
  }
  plcol0(kInk);
  const double descent = 0.3 * mt.cap;
  text((f.left + f.right) / 2.0, plan.height - mt.margin - descent - mt.cap / 2, chart.x.label, 0.5);
  text(mt.margin + descent + mt.cap / 2, (f.top + f.bottom) / 2.0, chart.y.label, 0.5, /*vertical=*/true);
  if (!chart.title.empty()) {
    set_text(mt.title_cap, /*bold=*/true);
    const double w = text_width_estimate(chart.title, mt.title_cap);
    text(std::max(mt.margin + w / 2, plan.width / 2.0), mt.margin + mt.title_cap / 2, chart.title, 0.5);
  }
}

// ---------------------------------------------------------------- legend

struct LegendEntry {
  const Series* series;
  int slot;
};

// Draws the legend with PLplot at `pos`; returns its width in pixels.
double draw_legend(const Chart& chart, const Plan& plan, const std::vector<LegendEntry>& entries, LegendPos pos) {
  const Frame& f = plan.frame;
  const Metrics mt(chart.text_scale);
  const auto n = static_cast<PLINT>(entries.size());
  std::vector<PLINT> opts(n), ink(n, kInk), slots(n), styles(n), threes(n, 3), zeros(n, 0);
  std::vector<PLFLT> widths(n), scales(n), unit(n, 1.0);
  std::vector<std::string> labels(n);
  std::vector<const char*> label_ptrs(n), glyphs(n);
  for (PLINT i = 0; i < n; ++i) {
    const Series& s = *entries[i].series;
    const bool line = s.line != LineStyle::none, mark = s.marker != Marker::none && s.marker_radius > 0;
    opts[i] = (line ? PL_LEGEND_LINE : 0) | (mark ? PL_LEGEND_SYMBOL : 0);
    if (opts[i] == 0) opts[i] = PL_LEGEND_NONE;
    slots[i] = entries[i].slot;
    styles[i] = s.line == LineStyle::dashed ? kDashed : 1;
    widths[i] = s.line_width;
    scales[i] = std::clamp(1.9 * s.marker_radius / mt.cap, 0.3, 2.0);  // a glyph is about one capital high
    labels[i] = escape(s.label);
    label_ptrs[i] = labels[i].c_str();
    glyphs[i] = marker_glyph(s.marker);
  }
  const double sample = 3.5 * mt.cap, inset = 0.6 * mt.cap;
  PLINT position = PL_POSITION_INSIDE;
  double x = 0, y = 0, across = 0;  // offsets and the sample length in PLplot's normalised units
  if (pos == LegendPos::outside_right) {
    pixel_world(plan.width, plan.height);
    position |= PL_POSITION_SUBPAGE | PL_POSITION_TOP | PL_POSITION_RIGHT;
    across = plan.width;
    x = mt.margin / plan.width;
    y = static_cast<double>(f.top) / plan.height;
  } else {
    frame_world(f, plan.width, plan.height);
    const bool left = pos == LegendPos::upper_left || pos == LegendPos::lower_left;
    const bool upper = pos == LegendPos::upper_left || pos == LegendPos::upper_right;
    position |= PL_POSITION_VIEWPORT | (left ? PL_POSITION_LEFT : PL_POSITION_RIGHT) |
                (upper ? PL_POSITION_TOP : PL_POSITION_BOTTOM);
    across = f.right - f.left;
    x = inset / across;
    y = inset / (f.bottom - f.top);
  }
  set_text(mt.cap);
  PLFLT w = 0, h = 0;
  pllegend(&w, &h, PL_LEGEND_BACKGROUND | PL_LEGEND_BOUNDING_BOX, position, x, y, sample / across, kWhite,
           kGridMajor, 1, 0, 0, n, opts.data(), 1.0, 1.0, 2.0, 0.0, ink.data(), label_ptrs.data(), zeros.data(),
           zeros.data(), unit.data(), unit.data(), slots.data(), styles.data(), widths.data(), slots.data(),
           scales.data(), threes.data(), glyphs.data());  // three markers: PLplot puts one at the sample's left end
  pllsty(1);
  return w * across;
}

// The inside corner whose legend box would cover the fewest points and line samples
// (the box size is estimated: PLplot only reports it after drawing).
LegendPos choose_corner(const Chart& chart, const Plan& plan, const std::vector<LegendEntry>& entries,
                        const std::vector<std::vector<Pt>>& pixels) {
  const Frame& f = plan.frame;
  const Metrics mt(chart.text_scale);
  double tw = 0;
  for (const auto& e : entries) tw = std::max(tw, text_width_estimate(e.series->label, mt.cap));
  const double bw = 5.5 * mt.cap + tw, bh = (2.0 * entries.size() + 1) * mt.cap, inset = 0.6 * mt.cap;
  LegendPos best_pos = LegendPos::upper_right;
  std::size_t best = ~std::size_t{0};
  for (LegendPos c : {LegendPos::upper_right, LegendPos::upper_left, LegendPos::lower_right, LegendPos::lower_left}) {
    const bool left = c == LegendPos::upper_left || c == LegendPos::lower_left;
    const bool upper = c == LegendPos::upper_left || c == LegendPos::upper_right;
    const double x0 = left ? f.left + inset : f.right - inset - bw, y0 = upper ? f.top + inset : f.bottom - inset - bh;
    std::size_t hits = 0;
    auto count = [&](double x, double y) { hits += x >= x0 - 4 && x < x0 + bw + 4 && y >= y0 - 4 && y < y0 + bh + 4; };
    for (std::size_t i = 0; i < pixels.size(); ++i) {
      const auto& pts = pixels[i];
      for (std::size_t k = 0; k < pts.size(); ++k) {
        count(pts[k].x, pts[k].y);
        if (k == 0 || chart.series[i].line == LineStyle::none) continue;
        const double len = std::hypot(pts[k].x - pts[k - 1].x, pts[k].y - pts[k - 1].y);
        const int steps = static_cast<int>(std::min(len / 6.0, 2000.0));
        for (int j = 1; j < steps; ++j) {
          const double t = static_cast<double>(j) / steps;
          count(pts[k - 1].x + t * (pts[k].x - pts[k - 1].x), pts[k - 1].y + t * (pts[k].y - pts[k - 1].y));
        }
      }
    }
    if (hits < best) {
      best = hits;
      best_pos = c;
    }
  }
  return best_pos;
}

// Draws the whole chart on the current stream; an outside legend moves plan.frame.right.
void draw_chart(const Chart& chart, Plan& plan) {
  std::vector<int> slots(chart.series.size());
  std::vector<LegendEntry> legend;
  std::size_t next_color = 0;
  for (std::size_t i = 0; i < chart.series.size(); ++i) {
    const Series& s = chart.series[i];
    slots[i] = kFirstFree + static_cast<int>(i);
    set_colour(slots[i], s.color ? *s.color : palette(next_color++));
    if (!s.label.empty()) legend.push_back({&s, slots[i]});
  }
  const bool show_legend = chart.legend != LegendPos::none && !legend.empty();
  if (show_legend && chart.legend == LegendPos::outside_right) {
    const Metrics mt(chart.text_scale);
    const double w = draw_legend(chart, plan, legend, LegendPos::outside_right);
    const double last_half = plan.xa.labels.empty() ? 0 : text_width_estimate(plan.xa.labels.back(), mt.cap) / 2;
    plan.frame.right = static_cast<int>(chart.width - mt.margin - w - mt.gap - last_half);
    check_frame(chart, plan.frame);
  }
  std::vector<std::vector<Pt>> pixels(chart.series.size());
  for (std::size_t i = 0; i < chart.series.size(); ++i)
    for (std::size_t k = 0; k < chart.series[i].x.size(); ++k)
      pixels[i].push_back({plan.frame.px(chart.series[i].x[k]), plan.frame.py(chart.series[i].y[k])});
  draw_grid(chart, plan);
  draw_series(chart, plan, pixels, slots);
  draw_axes(chart, plan);
  if (show_legend && chart.legend != LegendPos::outside_right) {
    const LegendPos pos =
        chart.legend == LegendPos::automatic ? choose_corner(chart, plan, legend, pixels) : chart.legend;
    draw_legend(chart, plan, legend, pos);
  }
}

int colour_slots(const Chart& chart) { return kFirstFree + static_cast<int>(chart.series.size()); }

}  // namespace

double Frame::px(double x) const {
  const double a = to_axis(x_scale, x_lo), b = to_axis(x_scale, x_hi);
  return left + (to_axis(x_scale, x) - a) / (b - a) * (right - left);
}

double Frame::py(double y) const {
  const double a = to_axis(y_scale, y_lo), b = to_axis(y_scale, y_hi);
  return bottom - (to_axis(y_scale, y) - a) / (b - a) * (bottom - top);
}

bool charts_available() { return true; }
void require_charts(const std::string&) {}

Frame layout(const Chart& chart) {
  Plan plan = make_plan(chart);
  draw_to_image(chart.width, chart.height, colour_slots(chart), [&] { draw_chart(chart, plan); });
  return plan.frame;
}

Image render(const Chart& chart) {
  Plan plan = make_plan(chart);
  return draw_to_image(chart.width, chart.height, colour_slots(chart), [&] { draw_chart(chart, plan); });
}

void write_chart(const Chart& chart, const std::filesystem::path& path) {
  Plan plan = make_plan(chart);
  draw_to_png(chart.width, chart.height, colour_slots(chart), path, [&] { draw_chart(chart, plan); });
}

void write_charts(const std::vector<Chart>& charts, const std::filesystem::path& path) {
  XS_ASSERT(!charts.empty(), "{}: no charts to write", path.string());
  std::vector<Image> parts;
  int width = 0, height = 0;
  for (const Chart& c : charts) {
    parts.push_back(render(c));
    width = std::max(width, parts.back().width);
    height += parts.back().height;
  }
  Image out = Image::blank(width, height, 3, 255);
  int top = 0;
  for (const Image& p : parts) {
    XS_ASSERT(p.channels == 3, "chart image with {} channels", p.channels);
    const std::size_t row = static_cast<std::size_t>(p.width) * 3;
    for (int y = 0; y < p.height; ++y) std::copy_n(p.pixels.data() + y * row, row, &out.at(top + y, 0));
    top += p.height;
  }
  write_png(out, path);
}

}  // namespace common::plot
