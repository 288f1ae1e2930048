// The sampling policy of every timed benchmark, ours and the baselines alike, so
// that both sides of a ratio are measured the same way. Header-only: the LibTorch
// baseline library links no project library.
//
// `timed(n)` launches the work n times back to back between two CUDA events and
// returns the elapsed milliseconds. Warm-up launches also estimate one launch's
// time; each sample then batches enough launches for ~2 ms (at most 50), and
// samples are taken until `reps` of them or, after a minimum of 3 (2 for launches
// of 50 ms or more, which vary little), until `budget_ms` is spent.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace xstage {

// Per-launch milliseconds, sorted ascending.
template <typename Timed>
std::vector<double> sample_launch_ms(Timed&& timed, int warmup, int reps, double budget_ms) {
  double est = 0;
  for (int i = 0; i < std::max(warmup, 1); ++i) est = timed(1);
  const int inner = std::clamp(static_cast<int>(std::ceil(2.0 / std::max(est, 1e-3))), 1, 50);
  const std::size_t min_samples = est >= 50 ? 2 : 3;
  std::vector<double> ms;
  double total = 0;
  while (static_cast<int>(ms.size()) < reps && (ms.size() < min_samples || total < budget_ms)) {
    const double t = timed(inner);
    ms.push_back(t / inner);
    total += t;
  }
  std::sort(ms.begin(), ms.end());
  return ms;
}

// Several variants compared with one another: samples taken in turns (variant 0,
// 1, ..., then 0, 1, ... again) so that a drift of the clock or the card's power
// state over the run moves every variant alike instead of whichever ran last.
// Each variant's batch size comes from its own warm-up, as in sample_launch_ms;
// returns each variant's per-launch milliseconds, sorted ascending.
template <typename Timed>
std::vector<std::vector<double>> sample_interleaved_ms(std::vector<Timed>& timed, int warmup, int reps) {
  std::vector<int> inner(timed.size());
  for (std::size_t v = 0; v < timed.size(); ++v) {
    double est = 0;
    for (int i = 0; i < std::max(warmup, 1); ++i) est = timed[v](1);
    inner[v] = std::clamp(static_cast<int>(std::ceil(2.0 / std::max(est, 1e-3))), 1, 50);
  }
  std::vector<std::vector<double>> ms(timed.size());
  for (int r = 0; r < std::max(reps, 1); ++r)
    for (std::size_t v = 0; v < timed.size(); ++v) ms[v].push_back(timed[v](inner[v]) / inner[v]);
  for (auto& m : ms) std::sort(m.begin(), m.end());
  return ms;
}

// Median of sorted, non-empty samples.
inline double median_of_sorted(const std::vector<double>& ms) {
  const std::size_t n = ms.size();
  return n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
}

}  // namespace xstage
