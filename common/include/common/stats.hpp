// Order statistics used by every benchmark and the probe: medians and percentiles
// (linear interpolation between closest ranks, as numpy's default).
#pragma once

#include <span>
#include <vector>

namespace common {

// q in [0, 1]; throws common::Error on an empty sample or q outside [0, 1].
double quantile(std::span<const double> xs, double q);
inline double median(std::span<const double> xs) { return quantile(xs, 0.5); }

struct Summary {
  double median = 0, p10 = 0, p90 = 0, min = 0, max = 0;
  std::size_t n = 0;
};
Summary summarize(std::span<const double> xs);

// Median of |a_i - b_i| / |b_i| over pairs with b_i != 0.
double median_abs_rel_error(std::span<const double> predicted, std::span<const double> measured);

}  // namespace common
