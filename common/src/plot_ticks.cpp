// The chart helpers that need no drawing library: the palette, the sequential colour
// map, tick positions and tick labels (common/plot.hpp). Built with or without PLplot.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "common/check.hpp"
#include "common/plot.hpp"

namespace common::plot {
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

}  // namespace common::plot
