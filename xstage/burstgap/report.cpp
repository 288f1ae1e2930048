// Human-readable and JSON reports of fits and predictions (what the CLI prints).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

#include "common/check.hpp"
#include "common/files.hpp"
#include "common/stats.hpp"
#include "xstage/burstgap/burstgap.hpp"

namespace xstage::burstgap {

namespace {

std::string opt_bytes(const std::optional<double>& v) { return v ? common::format_bytes(*v) : "-"; }
std::string opt_rate(const std::optional<double>& v) { return v ? fmt::format("{:.1f}", *v) : "-"; }
std::string pct(double v) { return std::isfinite(v) ? fmt::format("{:+.1f}%", 100 * v) : "inf"; }
std::string ns_or_none(double v) { return std::isfinite(v) ? common::format_ns(v) : "none"; }
std::string bytes_or_unlimited(double v) { return std::isfinite(v) ? common::format_bytes(v) : "unlimited"; }

std::string row_table(const std::vector<RowPrediction>& rows, std::size_t max_rows) {
  std::string s = fmt::format("  {:<9} {:<5} {:>4} {:>4} {:>10} {:>10} {:>11} {:>11} {:>8}\n", "pattern", "store",
                              "gpus", "sms", "burst", "gap", "measured", "predicted", "error");
  std::vector<const RowPrediction*> sorted;
  for (const auto& r : rows) sorted.push_back(&r);
  auto rank = [](const std::string& pattern) { return pattern == "local" ? 0 : pattern == "peer" ? 1 : 2; };
  std::sort(sorted.begin(), sorted.end(), [&](auto* a, auto* b) {
    return std::tuple(rank(a->row.pattern), a->row.store, a->row.gpus, a->row.sms, a->row.burst_bytes, a->row.gap_ns) <
           std::tuple(rank(b->row.pattern), b->row.store, b->row.gpus, b->row.sms, b->row.burst_bytes, b->row.gap_ns);
  });
  // Too many rows: an evenly spaced sample, so every group shows.
  const std::size_t shown = std::min(sorted.size(), max_rows);
  for (std::size_t k = 0; k < shown; ++k) {
    const auto& p = *sorted[k * sorted.size() / shown];
    s += fmt::format("  {:<9} {:<5} {:>4} {:>4} {:>10} {:>10} {:>11} {:>11} {:>8}\n", p.row.pattern, p.row.store,
                     p.row.gpus, p.row.sms, common::format_bytes(p.row.burst_bytes), common::format_ns(p.row.gap_ns),
                     common::format_ns(p.measured_ns), common::format_ns(p.predicted_ns), pct(p.rel_error));
  }
  if (sorted.size() > shown)
    s += fmt::format("  ({} of {} rows shown, evenly spaced; all are in the JSON report)\n", shown, sorted.size());
  return s;
}

}  // namespace

std::string format_params(const Params& params) {
  std::string s = fmt::format("{:<9} {:<5} {:>4} {:>9} {:>7} {:>8} {:>9} {:>10} {:>9} {:>12} {:>11} {:>5} {:>5} {:>7}\n",
                              "pattern", "store", "gpus", "t0 ns/B", "lat ns", "floor ns", "buffer", "drain GB/s", "drain/SM",
                              "capacity/GPU", "capacity/SM", "scope", "rows", "fit err");
  for (const auto& g : params.groups) {
    const std::string drain = fmt::format("{:.1f}{}", g.drain_GBps, g.drain_bound == Bound::lower ? "+" : "");
    std::string cap_gpu = opt_bytes(g.capacity_bytes_gpu), cap_sm = opt_bytes(g.capacity_bytes_per_sm);
    if (g.capacity_bound == Bound::lower) cap_gpu = ">=" + cap_gpu;
    const std::string floor = g.issue_floor_ns ? fmt::format("{:.1f}", *g.issue_floor_ns) : "-";
    s += fmt::format("{:<9} {:<5} {:>4} {:>9.5f} {:>7.1f} {:>8} {:>9} {:>10} {:>9} {:>12} {:>11} {:>5} {:>5} {:>6.1f}%\n",
                     g.pattern, g.store, g.gpus, g.t0_ns_per_byte, g.issue_latency_ns, floor,
                     opt_bytes(g.issue_buffer_bytes), drain,
                     opt_rate(g.drain_per_sm_GBps), cap_gpu, cap_sm, to_string(g.capacity_scope), g.n_rows,
                     100 * g.fit_rel_error_median);
  }
  for (const auto& g : params.groups)
    if (g.drain_bound == Bound::lower || g.capacity_bound == Bound::lower) {
      s += "(+ and >=: lower bounds; no row of the sweep is sensitive to the value)\n";
      break;
    }
  return s;
}

std::string format_fit_report(const FitResult& res, std::size_t max_rows) {
  std::string s;
  if (!res.notes.empty()) {
    s += "notes:\n";
    for (const auto& n : res.notes) s += "  " + n + "\n";
  }
  if (!res.held_out.empty()) {
    s += fmt::format("\nheld-out rows ({:.0f}% of each group, seed {}): predicted vs measured {}\n",
                     100 * res.params.holdout_fraction, res.params.seed, to_string(res.params.target));
    s += row_table(res.held_out, max_rows);
    s += fmt::format("held-out median absolute relative error (MdAPE): {:.1f}% over {} rows\n", 100 * res.holdout_mdape,
                     res.held_out.size());
    if (res.params.target == FitTarget::mean) {
      std::vector<double> med;
      for (const auto& p : res.held_out) med.push_back(std::abs(p.predicted_ns / p.row.issue_ns_med - 1));
      s += fmt::format("  (the same predictions against issue_ns_med: {:.1f}%)\n", 100 * common::median(med));
    }
  }
  std::vector<double> fit_errs;
  for (const auto& r : res.fitted) fit_errs.push_back(std::abs(r.rel_error));
  if (!fit_errs.empty())
    s += fmt::format("fitted rows: median absolute relative error {:.1f}% over {} rows\n",
                     100 * common::median(fit_errs), fit_errs.size());

  if (!res.min_gaps.empty()) {
    s += fmt::format("\nsmallest backpressure-free gap (issue time within {:.0f}% of the series' lowest):\n",
                     100 * res.free_tolerance);
    s += fmt::format("  {:<9} {:<5} {:>4} {:>4} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8}\n", "pattern", "store", "gpus",
                     "sms", "burst", "grid", "measured", "model", "g_min", "error");
    std::size_t shown = 0, bracketed = 0, scored = 0, unbracketed = 0, agree = 0;
    for (const auto& c : res.min_gaps) {
      if (!c.bracketed) {
        ++unbracketed;
        agree += c.model_agrees;
        continue;
      }
      ++bracketed;
      scored += c.scored;
      if (shown++ >= max_rows) continue;
      const std::string err = !c.scored                    ? "(noise)"
                              : std::isfinite(c.rel_error) ? fmt::format("{:.1f}%", 100 * c.rel_error)
                                                           : "inf";
      s += fmt::format("  {:<9} {:<5} {:>4} {:>4} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8}\n", c.pattern, c.store,
                       c.gpus, c.sms, common::format_bytes(c.burst_bytes), common::format_ns(c.measured_grid_ns),
                       common::format_ns(c.measured_ns), ns_or_none(c.model_ns), ns_or_none(c.model_strict_ns), err);
    }
    if (shown > max_rows) s += fmt::format("  ... {} more series in the JSON report\n", shown - max_rows);
    if (scored)
      s += fmt::format("min-gap median relative error: {:.1f}% over {} series with a clear stalled-to-free step",
                       100 * res.min_gap_median_rel_error, scored);
    else
      s += "min-gap: no series has a clear stalled-to-free step";
    if (bracketed > scored) s += fmt::format("; {} more step inside the noise band", bracketed - scored);
    s += "\n";
    if (unbracketed)
      s += fmt::format("{} series are free at every gap or at none; the model agrees on {}\n", unbracketed, agree);
  }

  if (!res.drains.empty()) {
    std::vector<double> de, ve;
    for (const auto& d : res.drains) {
      if (d.rel_error_drain > -1) de.push_back(std::abs(d.rel_error_drain));
      if (d.rel_error_visible > -1) ve.push_back(std::abs(d.rel_error_visible));
    }
    s += fmt::format("\nvisible-mode rows (not fitted): predicted issue + recovery vs measured, {} rows\n",
                     res.drains.size());
    if (!de.empty()) s += fmt::format("  vs drain_ns_med (fence returns): median abs error {:.1f}%\n", 100 * common::median(de));
    if (!ve.empty())
      s += fmt::format("  vs visible_ns_med (receiver sees the flag): median abs error {:.1f}%\n",
                       100 * common::median(ve));
  }
  return s;
}

Prediction predict(const ModelParams& p, int sms, double burst_bytes, double gap_ns, int bursts) {
  XS_ASSERT(sms >= 1, "--sms must be >= 1 (got {})", sms);
  XS_ASSERT(burst_bytes >= 1, "--burst must be at least 1 byte");
  XS_ASSERT(bursts >= 1 && bursts <= kMaxPredictedBursts, "--bursts must be in 1..{} (got {})", kMaxPredictedBursts, bursts);
  Prediction pr;
  pr.params = p;
  pr.sms = sms;
  pr.burst_bytes = burst_bytes;
  pr.gap_ns = gap_ns;
  pr.bursts = simulate_schedule(p, sms, burst_bytes, gap_ns, bursts);
  pr.free_issue_ns = free_issue_ns(p, burst_bytes);
  pr.steady_issue_ns = steady_issue_ns(p, sms, burst_bytes, gap_ns);
  pr.increment_bytes = burst_increment_bytes(p, sms, burst_bytes);
  pr.clean_bursts = clean_bursts(p, sms, burst_bytes, gap_ns);
  pr.min_gap_ns = min_gap_ns(p, sms, burst_bytes);
  pr.max_burst_bytes = max_burst_bytes(p, sms);
  BurstProfile prof;
  prof.bytes_per_burst = static_cast<std::size_t>(burst_bytes);
  prof.sms = sms;
  prof.compute_ns_between_bursts = gap_ns;
  prof.bursts = bursts;
  prof.pattern = p.pattern;
  prof.store = p.store;
  pr.advice = advise(p, prof);
  return pr;
}

std::string format_prediction(const Prediction& pr) {
  const ModelParams& p = pr.params;
  const Rates r = rates(p, pr.sms);
  std::string s;
  s += fmt::format("model {}/{}/{} GPUs: t0 {:.5f} ns/B per SM, latency {:.1f} ns", p.pattern, p.store, p.gpus,
                   p.t0_ns_per_byte, p.issue_latency_ns);
  if (p.issue_floor_ns) s += fmt::format(" (issue floor {:.1f} ns)", *p.issue_floor_ns);
  if (p.issue_buffer_bytes) s += fmt::format(" (issue buffer {} per SM)", common::format_bytes(*p.issue_buffer_bytes));
  if (p.backlog_limit_bytes) s += fmt::format(" (backlog limit {})", common::format_bytes(*p.backlog_limit_bytes));
  s += fmt::format(", drain {:.1f} GB/s", p.drain_GBps);
  if (p.drain_per_sm_GBps) s += fmt::format(" (per SM {:.1f})", *p.drain_per_sm_GBps);
  s += fmt::format(", capacity {}{} ({})\n", p.capacity_bound == Bound::lower ? ">= " : "",
                   bytes_or_unlimited(r.capacity), to_string(p.capacity_scope));
  if (pr.sms > p.sms_max) s += fmt::format("note: {} SMs is beyond the fitted range (up to {})\n", pr.sms, p.sms_max);
  s += fmt::format("schedule: {} SMs x {} = {} per burst, gap {}; issue {:.0f} GB/s into drain {:.0f} GB/s\n", pr.sms,
                   common::format_bytes(pr.burst_bytes), common::format_bytes(pr.sms * pr.burst_bytes),
                   common::format_ns(pr.gap_ns), r.inject, r.drain);
  s += fmt::format("\n{:>6} {:>11} {:>11} {:>14} {:>11}  {}\n", "burst", "issue", "overhead", "occupancy end",
                   "recovery", "");
  for (std::size_t k = 0; k < pr.bursts.size(); ++k) {
    const auto& o = pr.bursts[k];
    s += fmt::format("{:>6} {:>11} {:>11} {:>14} {:>11}  {}\n", k + 1, common::format_ns(o.issue_ns),
                     common::format_ns(o.overhead_ns), common::format_bytes(o.occupancy_end),
                     common::format_ns(o.recovery_ns), o.backpressured ? "backpressure" : "");
  }
  s += fmt::format("\nsteady state: {} per burst (overhead {}, {:.1f}x the backpressure-free {}); {:.0f} GB/s\n",
                   common::format_ns(pr.steady_issue_ns), common::format_ns(pr.steady_issue_ns - pr.free_issue_ns),
                   pr.steady_issue_ns / pr.free_issue_ns, common::format_ns(pr.free_issue_ns),
                   pr.sms * pr.burst_bytes / (pr.steady_issue_ns + pr.gap_ns));
  if (pr.clean_bursts < 0) {
    s += pr.increment_bytes <= 0 ? "backpressure: never (issue is no faster than the drain)\n"
                                 : fmt::format("backpressure: never (each burst adds {}, the gap drains it)\n",
                                               common::format_bytes(pr.increment_bytes));
  } else {
    s += fmt::format("backpressure: yes, from burst {} (after {} clean burst{}){}\n", pr.clean_bursts + 1,
                     pr.clean_bursts, pr.clean_bursts == 1 ? "" : "s",
                     pr.clean_bursts >= static_cast<int>(pr.bursts.size()) ? ", beyond the bursts shown" : "");
  }
  if (std::isfinite(pr.min_gap_ns)) {
    s += fmt::format("smallest gap that avoids it: {}\n", common::format_ns(pr.min_gap_ns));
  } else {
    s += fmt::format("no gap avoids it: one burst adds {}, more than the capacity {}; the largest burst that fits is "
                     "{} per SM\n",
                     common::format_bytes(pr.increment_bytes), bytes_or_unlimited(r.capacity),
                     common::format_bytes(std::floor(pr.max_burst_bytes)));
  }
  s += fmt::format("advice: {}", to_string(pr.advice.remedy));
  if (pr.advice.remedy == Remedy::split_burst) s += fmt::format(" into {}", pr.advice.recommended_split);
  if (pr.advice.remedy == Remedy::spread_over_more_sms) s += fmt::format(" to {} SMs", pr.advice.recommended_sms);
  if (pr.advice.remedy == Remedy::lengthen_gap) s += fmt::format(" to {}", common::format_ns(pr.advice.recommended_gap_ns));
  s += " -- " + pr.advice.reason + "\n";
  return s;
}

std::string prediction_to_json(const Prediction& pr) {
  using nlohmann::json;
  auto num = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
  json j;
  j["params"] = json::parse(params_to_json(Params{.source_csv = "", .groups = {pr.params}}))["groups"][0];
  j["sms"] = pr.sms;
  j["burst_bytes"] = pr.burst_bytes;
  j["gap_ns"] = pr.gap_ns;
  j["bursts"] = json::array();
  for (std::size_t k = 0; k < pr.bursts.size(); ++k) {
    const auto& o = pr.bursts[k];
    j["bursts"].push_back({{"index", k + 1}, {"issue_ns", o.issue_ns}, {"overhead_ns", o.overhead_ns},
                           {"occupancy_end_bytes", o.occupancy_end}, {"recovery_ns", o.recovery_ns},
                           {"backpressured", o.backpressured}});
  }
  j["free_issue_ns"] = pr.free_issue_ns;
  j["steady_issue_ns"] = pr.steady_issue_ns;
  j["increment_bytes"] = pr.increment_bytes;
  j["backpressure"] = pr.clean_bursts >= 0;
  j["clean_bursts"] = pr.clean_bursts >= 0 ? json(pr.clean_bursts) : json(nullptr);
  j["min_gap_ns"] = num(pr.min_gap_ns);
  j["max_burst_bytes"] = num(pr.max_burst_bytes);
  j["advice"] = {{"remedy", to_string(pr.advice.remedy)},
                 {"predicted_stall_ns", pr.advice.predicted_stall_ns},
                 {"backpressure_after_bursts", pr.advice.backpressure_after_bursts},
                 {"recommended_split", pr.advice.recommended_split},
                 {"recommended_sms", pr.advice.recommended_sms},
                 {"recommended_gap_ns", num(pr.advice.recommended_gap_ns)},
                 {"reason", pr.advice.reason}};
  return j.dump(2) + "\n";
}

}  // namespace xstage::burstgap
