// The host-link bench's derived figures and its summary (host only, CPU-tested): what
// the model predicts for a row, from attention's measured time in each order plus the
// Burst-Gap model's predicted stall of that order, against what the fused kernel took.
#include <algorithm>
#include <cmath>

#include "common/stats.hpp"
#include "xstage/bench/ulysses_bench.hpp"

namespace xstage::ulysses {

void finish_host_link_row(HostLinkRow& r) {
  const double guided = r.attention_guided_ms + r.predicted_stall_guided_us * 1e-3;
  const double row_major = r.attention_row_major_ms + r.predicted_stall_row_major_us * 1e-3;
  r.speedup_vs_row_major = r.fused_guided_ms > 0 ? r.fused_row_major_ms / r.fused_guided_ms : 0;
  r.predicted_speedup_vs_row_major = guided > 0 ? row_major / guided : 0;
  r.speedup_vs_exchange_after = r.fused_guided_ms > 0 ? r.exchange_after_ms / r.fused_guided_ms : 0;
  r.stall_predicted = r.predicted_stall_row_major_us * 1e-3 > 0.01 * r.attention_row_major_ms;
  r.link_GBps = r.fused_guided_ms > 0 ? r.remote_bytes / (r.fused_guided_ms * 1e6) : 0;
}

HostLinkSummary summarize_host_link(const std::vector<HostLinkRow>& rows) {
  HostLinkSummary s;
  if (rows.empty()) return s;
  double log_sum = 0;
  std::vector<double> errors;
  s.min_speedup = s.max_speedup = rows.front().speedup_vs_row_major;
  for (const auto& r : rows) {
    s.min_speedup = std::min(s.min_speedup, r.speedup_vs_row_major);
    s.max_speedup = std::max(s.max_speedup, r.speedup_vs_row_major);
    if (r.speedup_vs_row_major > 0)
      errors.push_back(std::abs(r.predicted_speedup_vs_row_major - r.speedup_vs_row_major) / r.speedup_vs_row_major);
    if (!r.stall_predicted || r.speedup_vs_row_major <= 0) continue;
    log_sum += std::log(r.speedup_vs_row_major);
    ++s.rows_where_stall_predicted;
  }
  if (s.rows_where_stall_predicted > 0) s.geomean_where_stall_predicted = std::exp(log_sum / s.rows_where_stall_predicted);
  if (!errors.empty()) s.speedup_prediction_median_abs_rel_error = common::median(errors);
  return s;
}

}  // namespace xstage::ulysses
