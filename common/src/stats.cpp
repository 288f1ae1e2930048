#include "common/stats.hpp"

#include <algorithm>
#include <cmath>

#include "common/check.hpp"

namespace common {

double quantile(std::span<const double> xs, double q) {
  XS_ASSERT(!xs.empty(), "quantile of an empty sample");
  XS_ASSERT(q >= 0.0 && q <= 1.0, "quantile {} outside [0, 1]", q);
  std::vector<double> v(xs.begin(), xs.end());
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const auto hi = std::min(lo + 1, v.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return v[lo] + (v[hi] - v[lo]) * frac;
}

Summary summarize(std::span<const double> xs) {
  Summary s;
  s.n = xs.size();
  s.median = quantile(xs, 0.5);
  s.p10 = quantile(xs, 0.1);
  s.p90 = quantile(xs, 0.9);
  s.min = *std::min_element(xs.begin(), xs.end());
  s.max = *std::max_element(xs.begin(), xs.end());
  return s;
}

double median_abs_rel_error(std::span<const double> predicted, std::span<const double> measured) {
  XS_ASSERT(predicted.size() == measured.size(), "{} predictions for {} measurements",
            predicted.size(), measured.size());
  std::vector<double> errs;
  for (std::size_t i = 0; i < predicted.size(); ++i) {
    if (measured[i] != 0.0) errs.push_back(std::abs(predicted[i] - measured[i]) / std::abs(measured[i]));
  }
  return median(errs);
}

}  // namespace common
