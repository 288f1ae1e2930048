// Chart rendering for common/plot.hpp.
//
// Order of work: validate the data and fix each axis range (data -> ticks ->
// tick labels), size the margins from the labels, then paint back to front:
// grid, series (lines, then markers with a white halo), frame and ticks, labels,
// title, legend. Lines and markers are rasterised into a coverage mask per series
// (max over segments) and blended once, so joints and overlapping dashes do not
// darken.
#include "common/plot.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "common/check.hpp"
#include "font5x9.hpp"

namespace common::plot {

namespace {

// ---------------------------------------------------------------- raster helpers

struct Rect {
  int x0, y0, x1, y1;  // inclusive-exclusive: [x0, x1) x [y0, y1)
};

constexpr Color kWhite{255, 255, 255};
constexpr Color kInk{40, 40, 40};          // text
constexpr Color kFrame{70, 70, 70};        // axes box and ticks
constexpr Color kGridMajor{222, 222, 222};
constexpr Color kGridMinor{240, 240, 240};

void blend(Image& img, int x, int y, Color c, double alpha) {
  if (x < 0 || y < 0 || x >= img.width || y >= img.height || alpha <= 0) return;
  alpha = std::min(alpha, 1.0);
  auto mix = [alpha](std::uint8_t& dst, std::uint8_t src) {
    dst = static_cast<std::uint8_t>(std::lround(dst + (static_cast<double>(src) - dst) * alpha));
  };
  mix(img.at(y, x, 0), c.r);
  mix(img.at(y, x, 1), c.g);
  mix(img.at(y, x, 2), c.b);
}

void fill_rect(Image& img, int x0, int y0, int x1, int y1, Color c) {
  for (int y = std::max(0, y0); y < std::min(img.height, y1); ++y)
    for (int x = std::max(0, x0); x < std::min(img.width, x1); ++x) blend(img, x, y, c, 1.0);
}

void hline(Image& img, int x0, int x1, int y, Color c) { fill_rect(img, x0, y, x1 + 1, y + 1, c); }
void vline(Image& img, int x, int y0, int y1, Color c) { fill_rect(img, x, y0, x + 1, y1 + 1, c); }

// Coverage mask over a clip rectangle; shapes are max-combined, then blended once.
class Mask {
 public:
  explicit Mask(Rect clip)
      : clip_(clip), w_(clip.x1 - clip.x0), cov_(static_cast<std::size_t>(w_) * (clip.y1 - clip.y0), 0.0f) {}

  void put(int x, int y, double c) {
    if (x < clip_.x0 || y < clip_.y0 || x >= clip_.x1 || y >= clip_.y1 || c <= 0) return;
    float& dst = cov_[static_cast<std::size_t>(y - clip_.y0) * w_ + (x - clip_.x0)];
    dst = std::max(dst, static_cast<float>(std::min(c, 1.0)));
  }

  void blend_into(Image& img, Color c) const {
    for (int y = clip_.y0; y < clip_.y1; ++y)
      for (int x = clip_.x0; x < clip_.x1; ++x) {
        const float a = cov_[static_cast<std::size_t>(y - clip_.y0) * w_ + (x - clip_.x0)];
        if (a > 0) blend(img, x, y, c, a);
      }
  }

  // A round-capped segment of width `w`; coverage from the distance to the centre line.
  void segment(double x0, double y0, double x1, double y1, double w) {
    const double r = w / 2, ext = r + 1.0;
    const double dx = x1 - x0, dy = y1 - y0, len2 = dx * dx + dy * dy;
    const int ya = std::max(clip_.y0, static_cast<int>(std::floor(std::min(y0, y1) - ext)));
    const int yb = std::min(clip_.y1 - 1, static_cast<int>(std::ceil(std::max(y0, y1) + ext)));
    for (int py = ya; py <= yb; ++py) {
      const double yc = py + 0.5;
      double ta = 0, tb = 1;
      if (std::abs(dy) > 1e-12) {
        ta = (yc - ext - y0) / dy;
        tb = (yc + ext - y0) / dy;
        if (ta > tb) std::swap(ta, tb);
        ta = std::max(ta, 0.0);
        tb = std::min(tb, 1.0);
        if (ta > tb) continue;
      } else if (std::abs(yc - y0) > ext) {
        continue;
      }
      const double xa = x0 + ta * dx, xb = x0 + tb * dx;
      const int pxa = std::max(clip_.x0, static_cast<int>(std::floor(std::min(xa, xb) - ext)));
      const int pxb = std::min(clip_.x1 - 1, static_cast<int>(std::ceil(std::max(xa, xb) + ext)));
      for (int px = pxa; px <= pxb; ++px) {
        const double xc = px + 0.5;
        double t = len2 > 0 ? ((xc - x0) * dx + (yc - y0) * dy) / len2 : 0.0;
        t = std::clamp(t, 0.0, 1.0);
        const double d = std::hypot(xc - (x0 + t * dx), yc - (y0 + t * dy));
        put(px, py, r + 0.5 - d);
      }
    }
  }

  // A marker centred at (cx, cy): coverage = 0.5 - signed distance (pixels).
  void marker(Marker m, double cx, double cy, double radius) {
    if (m == Marker::none) return;
    const int e = static_cast<int>(std::ceil(radius * 1.5 + 2));
    const int icx = static_cast<int>(std::floor(cx)), icy = static_cast<int>(std::floor(cy));
    for (int py = icy - e; py <= icy + e; ++py)
      for (int px = icx - e; px <= icx + e; ++px) {
        const double x = px + 0.5 - cx, y = py + 0.5 - cy;
        put(px, py, 0.5 - marker_sdf(m, x, y, radius));
      }
  }

 private:
  static double marker_sdf(Marker m, double x, double y, double r) {
    switch (m) {
      case Marker::circle:
        return std::hypot(x, y) - r;
      case Marker::square:
        return std::max(std::abs(x), std::abs(y)) - 0.85 * r;
      case Marker::diamond:
        return (std::abs(x) + std::abs(y) - 1.25 * r) / std::sqrt(2.0);
      case Marker::triangle: {
        // Equilateral triangle pointing up (image y grows downwards), circumradius 1.3 r.
        const double k = std::sqrt(3.0), s = 1.3 * r * k / 2;  // half side
        double px = std::abs(x) - s, py = -y + s / k - 0.2 * r;
        if (px + k * py > 0) {
          const double nx = (px - k * py) / 2, ny = (-k * px - py) / 2;
          px = nx;
          py = ny;
        }
        px -= std::clamp(px, -2 * s, 0.0);
        return -std::hypot(px, py) * (py < 0 ? -1.0 : 1.0);
      }
      case Marker::cross: {
        const double u = (x + y) / std::sqrt(2.0), v = (x - y) / std::sqrt(2.0), h = 0.2 * r + 0.6;
        const double a = std::max(std::abs(u) - 1.2 * r, std::abs(v) - h);
        const double b = std::max(std::abs(v) - 1.2 * r, std::abs(u) - h);
        return std::min(a, b);
      }
      case Marker::none:
        break;
    }
    return 1e9;
  }

  Rect clip_;
  int w_;
  std::vector<float> cov_;
};

// Liang-Barsky: clips the segment to `r` grown by `pad`; false when it misses.
bool clip_segment(double& x0, double& y0, double& x1, double& y1, Rect r, double pad) {
  const double xmin = r.x0 - pad, xmax = r.x1 + pad, ymin = r.y0 - pad, ymax = r.y1 + pad;
  double t0 = 0, t1 = 1;
  const double dx = x1 - x0, dy = y1 - y0;
  const double p[4] = {-dx, dx, -dy, dy};
  const double q[4] = {x0 - xmin, xmax - x0, y0 - ymin, ymax - y0};
  for (int i = 0; i < 4; ++i) {
    if (p[i] == 0) {
      if (q[i] < 0) return false;
      continue;
    }
    const double t = q[i] / p[i];
    if (p[i] < 0) t0 = std::max(t0, t);
    else t1 = std::min(t1, t);
  }
  if (t0 > t1) return false;
  const double nx0 = x0 + t0 * dx, ny0 = y0 + t0 * dy, nx1 = x0 + t1 * dx, ny1 = y0 + t1 * dy;
  x0 = nx0;
  y0 = ny0;
  x1 = nx1;
  y1 = ny1;
  return true;
}

struct Pt {
  double x, y;
};

// Strokes a polyline, solid or dashed (the dash phase runs on along the whole line).
void stroke_polyline(Mask& mask, const std::vector<Pt>& pts, double width, LineStyle style, Rect clip) {
  if (style == LineStyle::none || pts.size() < 2) return;
  const double on = 4 * width + 4, period = on + 2 * width + 4;
  double phase = 0;  // distance into the current on+off period at the start of segment i
  for (std::size_t i = 1; i < pts.size(); ++i) {
    const double ox = pts[i - 1].x, oy = pts[i - 1].y;
    double x0 = ox, y0 = oy, x1 = pts[i].x, y1 = pts[i].y;
    const double full = std::hypot(x1 - x0, y1 - y0);
    const double start_phase = phase;
    phase = std::fmod(phase + full, period);
    if (!clip_segment(x0, y0, x1, y1, clip, width + 2)) continue;
    if (style == LineStyle::solid) {
      mask.segment(x0, y0, x1, y1, width);
      continue;
    }
    const double len = std::hypot(x1 - x0, y1 - y0);
    if (len <= 0) continue;
    const double ux = (x1 - x0) / len, uy = (y1 - y0) / len;
    double p = std::fmod(start_phase + std::hypot(x0 - ox, y0 - oy), period);
    for (double s = 0; s < len;) {
      const bool drawing = p < on;
      const double step = std::min(len - s, drawing ? on - p : period - p);
      if (drawing) mask.segment(x0 + ux * s, y0 + uy * s, x0 + ux * (s + step), y0 + uy * (s + step), width);
      s += step;
      p = std::fmod(p + step, period);
    }
  }
}

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

// ---------------------------------------------------------------- public helpers

Color palette(std::size_t i) {
  // After Okabe & Ito's colour-blind-safe set; yellow darkened to read on white.
  static constexpr std::array<Color, 8> kColors{{{0, 114, 178},
                                                 {213, 94, 0},
                                                 {0, 158, 115},
                                                 {204, 121, 167},
                                                 {230, 159, 0},
                                                 {86, 180, 233},
                                                 {60, 60, 60},
                                                 {170, 150, 0}}};
  return kColors[i % kColors.size()];
}

Color sequential(double t) {
  // Samples of matplotlib's viridis at t = 0, 1/8, ..., 1, linearly interpolated.
  static constexpr std::array<Color, 9> kStops{{{68, 1, 84},
                                                {71, 44, 122},
                                                {59, 82, 139},
                                                {44, 114, 142},
                                                {33, 145, 140},
                                                {40, 174, 128},
                                                {94, 201, 98},
                                                {173, 220, 48},
                                                {253, 231, 37}}};
  t = std::clamp(std::isfinite(t) ? t : 0.0, 0.0, 1.0) * (kStops.size() - 1);
  const auto i = std::min(static_cast<std::size_t>(t), kStops.size() - 2);
  const double f = t - static_cast<double>(i);
  auto mix = [f](std::uint8_t a, std::uint8_t b) { return static_cast<std::uint8_t>(std::lround(a + (b - a) * f)); };
  return {mix(kStops[i].r, kStops[i + 1].r), mix(kStops[i].g, kStops[i + 1].g), mix(kStops[i].b, kStops[i + 1].b)};
}

std::vector<double> nice_ticks(double lo, double hi, Scale scale, int target) {
  XS_ASSERT(std::isfinite(lo) && std::isfinite(hi) && lo < hi, "nice_ticks: bad range [{}, {}]", lo, hi);
  target = std::max(target, 2);
  std::vector<double> out;
  if (scale == Scale::log10) {
    XS_ASSERT(lo > 0, "nice_ticks: log range must be positive, got [{}, {}]", lo, hi);
    const double la = std::log10(lo), lb = std::log10(hi);
    const int d0 = static_cast<int>(std::ceil(la - 1e-9)), d1 = static_cast<int>(std::floor(lb + 1e-9));
    const int decades = d1 - d0 + 1;
    if (decades >= 3) {
      const int stride = std::max(1, (decades + target - 1) / target);
      for (int d = d0; d <= d1; ++d)
        if ((d - d0) % stride == 0) out.push_back(std::pow(10.0, d));
      return out;
    }
    for (int d = static_cast<int>(std::floor(la)); d <= d1 + 1; ++d)
      for (double m : {1.0, 2.0, 5.0}) {
        const double v = m * std::pow(10.0, d);
        if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) out.push_back(v);
      }
    if (out.size() >= 2) return out;
    out.clear();  // under a factor of ~2.5: plain 1-2-5 steps read best
  }
  const double raw = (hi - lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  const double step = (norm < 1.5 ? 1.0 : norm < 3.0 ? 2.0 : norm < 7.0 ? 5.0 : 10.0) * mag;
  for (double k = std::ceil(lo / step - 1e-9); k * step <= hi + step * 1e-9; k += 1.0) {
    double v = k * step;
    if (std::abs(v) < step * 1e-9) v = 0.0;
    out.push_back(v);
  }
  return out;
}

std::string format_tick(double v) {
  if (v == 0) return "0";
  const double a = std::abs(v);
  auto trimmed = [](double x) { return fmt::format("{:.3g}", x); };
  if (a >= 1e12) return trimmed(v / 1e12) + "T";
  if (a >= 1e9) return trimmed(v / 1e9) + "G";
  if (a >= 1e6) return trimmed(v / 1e6) + "M";
  if (a >= 1e3) return trimmed(v / 1e3) + "k";
  if (a < 1e-3) return fmt::format("{:.0e}", v);
  return fmt::format("{:.4g}", v);
}

int text_width(const std::string& text, int scale) {
  if (text.empty()) return 0;
  return (static_cast<int>(text.size()) * font::kAdvance - 1) * scale;
}

int text_height(int scale) { return font::kGlyphH * scale; }

void draw_text(Image& img, int x, int y, const std::string& text, Color color, int scale, bool vertical) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto& g = font::glyph(text[i]);
    const int base = static_cast<int>(i) * font::kAdvance * scale;
    for (int r = 0; r < font::kGlyphH; ++r)
      for (int c = 0; c < font::kGlyphW; ++c) {
        if (!(g[static_cast<std::size_t>(r)] & (1u << (font::kGlyphW - 1 - c)))) continue;
        if (vertical) {
          // Rotated 90 degrees counter-clockwise: glyph rows run left to right,
          // the text runs upwards from (x, y).
          const int px = x + r * scale, py = y - base - (c + 1) * scale;
          fill_rect(img, px, py, px + scale, py + scale, color);
        } else {
          const int px = x + base + c * scale, py = y + r * scale;
          fill_rect(img, px, py, px + scale, py + scale, color);
        }
      }
  }
}

double Frame::px(double x) const {
  const double a = to_axis(x_scale, x_lo), b = to_axis(x_scale, x_hi);
  return left + (to_axis(x_scale, x) - a) / (b - a) * (right - left);
}

double Frame::py(double y) const {
  const double a = to_axis(y_scale, y_lo), b = to_axis(y_scale, y_hi);
  return bottom - (to_axis(y_scale, y) - a) / (b - a) * (bottom - top);
}

// ---------------------------------------------------------------- layout

namespace {

struct Plan {
  Frame frame;
  AxisPlan xa, ya;
};

// Legend box (width, height) in pixels; (0, 0) without labelled series.
std::pair<int, int> legend_size(const Chart& chart) {
  const int ts = chart.text_scale, th = text_height(ts), pad = 4 * ts, sample = 16 * ts, row = th + 2 * ts;
  int tw = 0, n = 0;
  for (const auto& s : chart.series)
    if (!s.label.empty()) {
      tw = std::max(tw, text_width(s.label, ts));
      ++n;
    }
  if (n == 0) return {0, 0};
  return {pad * 2 + sample + pad + tw, pad * 2 + n * row - 2 * ts};
}

Plan make_plan(const Chart& chart) {
  XS_ASSERT(chart.text_scale >= 1 && chart.text_scale <= 8, "chart text_scale {} outside 1..8", chart.text_scale);
  XS_ASSERT(chart.width >= 64 && chart.height >= 64 && chart.width <= 16384 && chart.height <= 16384,
            "chart size {}x{} outside 64..16384 pixels", chart.width, chart.height);
  std::vector<double> xs, ys;
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
  Plan p;
  p.xa = plan_axis(chart.x, xs, "x");
  p.ya = plan_axis(chart.y, ys, "y");

  const int ts = chart.text_scale, th = text_height(ts), cap = 7 * ts, m = 6 * ts + 4, tick = 5, gap = 4 * ts;
  int ytw = 0;
  for (const auto& l : p.ya.labels) ytw = std::max(ytw, text_width(l, ts));
  Frame& f = p.frame;
  f.top = m + (chart.title.empty() ? 0 : th + gap) + cap / 2;
  f.left = m + (chart.y.label.empty() ? 0 : th + gap) + ytw + tick + gap;
  const int last_half = p.xa.labels.empty() ? 0 : text_width(p.xa.labels.back(), ts) / 2;
  f.right = chart.width - m - std::max(0, last_half - m);
  if (chart.legend == LegendPos::outside_right) f.right = chart.width - m - legend_size(chart).first - gap - last_half;
  f.bottom = chart.height - m - (chart.x.label.empty() ? 0 : th + gap) - cap - tick - gap;
  XS_ASSERT(f.right - f.left >= 40 && f.bottom - f.top >= 40,
            "chart {}x{} is too small for its labels (plot area {}x{})", chart.width, chart.height, f.right - f.left,
            f.bottom - f.top);
  f.x_scale = chart.x.scale;
  f.y_scale = chart.y.scale;
  f.x_lo = p.xa.lo;
  f.x_hi = p.xa.hi;
  f.y_lo = p.ya.lo;
  f.y_hi = p.ya.hi;
  return p;
}

struct LegendEntry {
  const Series* series;
  Color color;
};

}  // namespace

Frame layout(const Chart& chart) { return make_plan(chart).frame; }

Image render(const Chart& chart) {
  const Plan plan = make_plan(chart);
  const Frame& f = plan.frame;
  const int ts = chart.text_scale, th = text_height(ts), cap = 7 * ts, m = 6 * ts + 4, tick = 5, gap = 4 * ts;
  Image img = Image::blank(chart.width, chart.height, 3, 255);
  const Rect plot{f.left, f.top, f.right + 1, f.bottom + 1};

  // Grid.
  if (chart.grid) {
    for (double v : plan.xa.minor) vline(img, static_cast<int>(std::lround(f.px(v))), f.top, f.bottom, kGridMinor);
    for (double v : plan.ya.minor) hline(img, f.left, f.right, static_cast<int>(std::lround(f.py(v))), kGridMinor);
    for (double v : plan.xa.major) vline(img, static_cast<int>(std::lround(f.px(v))), f.top, f.bottom, kGridMajor);
    for (double v : plan.ya.major) hline(img, f.left, f.right, static_cast<int>(std::lround(f.py(v))), kGridMajor);
  }

  // Series: lines first (all series), then markers on top.
  std::vector<LegendEntry> legend;
  std::vector<std::vector<Pt>> pixels(chart.series.size());
  std::vector<Color> colors(chart.series.size());
  std::size_t next_color = 0;
  for (std::size_t i = 0; i < chart.series.size(); ++i) {
    const Series& s = chart.series[i];
    colors[i] = s.color ? *s.color : palette(next_color++);
    for (std::size_t k = 0; k < s.x.size(); ++k) pixels[i].push_back({f.px(s.x[k]), f.py(s.y[k])});
    if (!s.label.empty()) legend.push_back({&s, colors[i]});
  }
  for (std::size_t i = 0; i < chart.series.size(); ++i) {
    Mask mask(plot);
    stroke_polyline(mask, pixels[i], chart.series[i].line_width, chart.series[i].line, plot);
    mask.blend_into(img, colors[i]);
  }
  for (std::size_t i = 0; i < chart.series.size(); ++i) {
    const Series& s = chart.series[i];
    if (s.marker == Marker::none || s.marker_radius <= 0) continue;
    Mask halo(plot), body(plot);
    for (const Pt& p : pixels[i]) {
      halo.marker(s.marker, p.x, p.y, s.marker_radius + 1.5);
      body.marker(s.marker, p.x, p.y, s.marker_radius);
    }
    halo.blend_into(img, kWhite);
    body.blend_into(img, colors[i]);
  }

  // Frame, ticks and tick labels.
  hline(img, f.left, f.right, f.top, kFrame);
  hline(img, f.left, f.right, f.bottom, kFrame);
  vline(img, f.left, f.top, f.bottom, kFrame);
  vline(img, f.right, f.top, f.bottom, kFrame);
  int prev_right = -1 << 30;
  for (std::size_t k = 0; k < plan.xa.major.size(); ++k) {
    const int x = static_cast<int>(std::lround(f.px(plan.xa.major[k])));
    vline(img, x, f.bottom, f.bottom + tick, kFrame);
    const std::string& l = plan.xa.labels[k];
    const int lx = x - text_width(l, ts) / 2;
    if (lx < prev_right + 3 * ts) continue;  // would overlap its left neighbour
    draw_text(img, lx, f.bottom + tick + gap, l, kInk, ts);
    prev_right = lx + text_width(l, ts);
  }
  int prev_top = 1 << 30;
  for (std::size_t k = 0; k < plan.ya.major.size(); ++k) {
    const int y = static_cast<int>(std::lround(f.py(plan.ya.major[k])));
    hline(img, f.left - tick, f.left, y, kFrame);
    const std::string& l = plan.ya.labels[k];
    const int ly = y - cap / 2;
    if (ly + cap > prev_top - ts) continue;
    draw_text(img, f.left - tick - gap - text_width(l, ts), ly, l, kInk, ts);
    prev_top = ly;
  }

  // Axis labels and title.
  if (!chart.x.label.empty()) {
    const int w = text_width(chart.x.label, ts);
    draw_text(img, (f.left + f.right) / 2 - w / 2, chart.height - m - th + 2 * ts, chart.x.label, kInk, ts);
  }
  if (!chart.y.label.empty()) {
    const int w = text_width(chart.y.label, ts);
    draw_text(img, m, (f.top + f.bottom) / 2 + w / 2, chart.y.label, kInk, ts, /*vertical=*/true);
  }
  if (!chart.title.empty()) {
    const int w = text_width(chart.title, ts);
    const int x = std::max(m, (chart.width - w) / 2);
    draw_text(img, x, m, chart.title, kInk, ts);
    draw_text(img, x + 1, m, chart.title, kInk, ts);  // bold: a second pass one pixel right
  }

  // Legend: a boxed list in the corner that covers the fewest data pixels.
  if (chart.legend != LegendPos::none && !legend.empty()) {
    const int pad = 4 * ts, sample = 16 * ts, row = th + 2 * ts;
    const auto [bw, bh] = legend_size(chart);
    const int inset = 3 * ts;
    auto box_at = [&](LegendPos pos) {
      if (pos == LegendPos::outside_right) return Rect{chart.width - m - bw, f.top, chart.width - m, f.top + bh};
      const bool left = pos == LegendPos::upper_left || pos == LegendPos::lower_left;
      const bool upper = pos == LegendPos::upper_left || pos == LegendPos::upper_right;
      const int x = left ? f.left + inset : f.right - inset - bw;
      const int y = upper ? f.top + inset : f.bottom - inset - bh;
      return Rect{x, y, x + bw, y + bh};
    };
    LegendPos pos = chart.legend;
    if (pos == LegendPos::automatic) {
      std::size_t best = ~std::size_t{0};
      for (LegendPos c : {LegendPos::upper_right, LegendPos::upper_left, LegendPos::lower_right, LegendPos::lower_left}) {
        const Rect r = box_at(c);
        std::size_t hits = 0;
        auto count = [&](double x, double y) {
          if (x >= r.x0 - 4 && x < r.x1 + 4 && y >= r.y0 - 4 && y < r.y1 + 4) ++hits;
        };
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
          pos = c;
        }
      }
    }
    const Rect r = box_at(pos);
    fill_rect(img, r.x0, r.y0, r.x1, r.y1, kWhite);
    hline(img, r.x0, r.x1, r.y0, kGridMajor);
    hline(img, r.x0, r.x1, r.y1, kGridMajor);
    vline(img, r.x0, r.y0, r.y1, kGridMajor);
    vline(img, r.x1, r.y0, r.y1, kGridMajor);
    const Rect all{0, 0, chart.width, chart.height};
    for (std::size_t k = 0; k < legend.size(); ++k) {
      const Series& s = *legend[k].series;
      const int y = r.y0 + pad + static_cast<int>(k) * row;
      const double cy = y + cap / 2.0;
      Mask mask(all);
      stroke_polyline(mask, {{r.x0 + pad + 0.0, cy}, {r.x0 + pad + sample + 0.0, cy}}, s.line_width, s.line, all);
      mask.blend_into(img, legend[k].color);
      if (s.marker != Marker::none && s.marker_radius > 0) {
        Mask halo(all), body(all);
        halo.marker(s.marker, r.x0 + pad + sample / 2.0, cy, s.marker_radius + 1.5);
        body.marker(s.marker, r.x0 + pad + sample / 2.0, cy, s.marker_radius);
        halo.blend_into(img, kWhite);
        body.blend_into(img, legend[k].color);
      }
      draw_text(img, r.x0 + pad + sample + pad, y, s.label, kInk, ts);
    }
  }
  return img;
}

void write_chart(const Chart& chart, const std::filesystem::path& path) { write_png(render(chart), path); }

}  // namespace common::plot
