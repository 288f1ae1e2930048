#include "xstage/burstgap/nelder_mead.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "common/check.hpp"

namespace xstage::burstgap {

NelderMeadResult nelder_mead(const std::function<double(std::span<const double>)>& f, std::vector<double> x0,
                             const NelderMeadOptions& o) {
  const std::size_t n = x0.size();
  XS_ASSERT(n >= 1, "nelder_mead needs at least one parameter");
  int evals = 0;
  auto eval = [&](const std::vector<double>& x) {
    ++evals;
    const double v = f(x);
    return std::isnan(v) ? std::numeric_limits<double>::infinity() : v;
  };
  NelderMeadResult best{x0, eval(x0), 0};

  for (int run = 0; run <= o.restarts && evals < o.max_evals; ++run) {
    // Simplex around the best point so far.
    std::vector<std::vector<double>> xs(n + 1, best.x);
    std::vector<double> fs(n + 1);
    fs[0] = best.f;
    for (std::size_t i = 0; i < n; ++i) {
      xs[i + 1][i] += o.initial_step;
      fs[i + 1] = eval(xs[i + 1]);
    }
    std::vector<std::size_t> order(n + 1);
    std::vector<double> centroid(n), xr(n), xe(n), xc(n);
    while (evals < o.max_evals) {
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return fs[a] < fs[b]; });
      const std::size_t lo = order.front(), hi = order.back(), second = order[n - 1];
      double spread = 0;
      for (std::size_t i = 0; i <= n; ++i)
        for (std::size_t k = 0; k < n; ++k) spread = std::max(spread, std::abs(xs[i][k] - xs[lo][k]));
      if (spread < o.x_tol && fs[hi] - fs[lo] <= o.f_tol) break;

      std::fill(centroid.begin(), centroid.end(), 0.0);
      for (std::size_t i = 0; i <= n; ++i)
        if (i != hi)
          for (std::size_t k = 0; k < n; ++k) centroid[k] += xs[i][k] / static_cast<double>(n);
      for (std::size_t k = 0; k < n; ++k) xr[k] = centroid[k] + (centroid[k] - xs[hi][k]);
      const double fr = eval(xr);
      if (fr < fs[lo]) {
        for (std::size_t k = 0; k < n; ++k) xe[k] = centroid[k] + 2.0 * (centroid[k] - xs[hi][k]);
        const double fe = eval(xe);
        if (fe < fr) {
          xs[hi] = xe;
          fs[hi] = fe;
        } else {
          xs[hi] = xr;
          fs[hi] = fr;
        }
        continue;
      }
      if (fr < fs[second]) {
        xs[hi] = xr;
        fs[hi] = fr;
        continue;
      }
      // Contract towards the better of the worst point and its reflection.
      const bool outside = fr < fs[hi];
      const std::vector<double>& toward = outside ? xr : xs[hi];
      for (std::size_t k = 0; k < n; ++k) xc[k] = centroid[k] + 0.5 * (toward[k] - centroid[k]);
      const double fc = eval(xc);
      if (fc < std::min(fr, fs[hi])) {
        xs[hi] = xc;
        fs[hi] = fc;
        continue;
      }
      // Shrink everything towards the best point.
      for (std::size_t i = 0; i <= n; ++i) {
        if (i == lo) continue;
        for (std::size_t k = 0; k < n; ++k) xs[i][k] = xs[lo][k] + 0.5 * (xs[i][k] - xs[lo][k]);
        fs[i] = eval(xs[i]);
      }
    }
    const auto it = std::min_element(fs.begin(), fs.end());
    const std::size_t at = static_cast<std::size_t>(it - fs.begin());
    if (fs[at] <= best.f) {
      best.x = xs[at];
      best.f = fs[at];
    }
  }
  best.evals = evals;
  return best;
}

}  // namespace xstage::burstgap
