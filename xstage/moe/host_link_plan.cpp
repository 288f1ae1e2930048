// The predicted side of `xstage bench moe --link host` (host only, CPU-tested): both
// schedules of rank 0 with the one GPU's SMs split over the P emulated ranks, each
// order's compute time by the ticket simulation (order_time_ns: its dependency waits and
// tail, not only the tiles' sum). The host link's stage holds the SMs' reads while it
// drains (burstgap::read_blocked_drain_ns), so with SM stores the combine's bytes over the
// link add bytes / D to the mainloops in either order, and the combine reads them back
// over the link after them; the combine drain moves them by copy engine as the experts'
// L2 tiles end (predict_drain_us).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/check.hpp"
#include "common/files.hpp"
#include "common/stats.hpp"
#include "xstage/bench/report.hpp"
#include "xstage/bench/moe_bench.hpp"

namespace xstage::moe {

double predict_drain_us(double compute_us, const std::vector<DrainExpertCost>& experts, int experts_per_copy,
                        double row_bytes, int ranks, double readback_bytes, const burstgap::CopyCosts& copy,
                        double read_GBps, const burstgap::ModelParams& link) {
  const double GBps = copy.GBps > 0 ? copy.GBps : link.drain_GBps;
  const double op_us = copy.op_ms * 1e3;
  std::vector<DrainExpertCost> by_end = experts;
  std::stable_sort(by_end.begin(), by_end.end(),
                   [](const DrainExpertCost& a, const DrainExpertCost& b) { return a.l2_end_us < b.l2_end_us; });
  std::vector<std::vector<DrainCopy>> copies;
  for (const DrainExpertCost& e : by_end) copies.push_back(e.copies);
  double link_free = 0;
  for (const DrainGroup& g : group_drain(copies, experts_per_copy)) {
    const double ready = by_end[g.first + g.count - 1].l2_end_us;  // the group's last
    double rows = 0;
    for (const DrainCopy& c : g.copies) rows += c.rows;
    const double ops = double(g.count) + double(g.copies.size());  // the waits and the copies
    link_free = std::max(link_free, ready) + ranks * (op_us * ops + rows * row_bytes / GBps * 1e-3);
  }
  // The flags' writes: P per rank after its last copy.
  const double readback_us = read_GBps > 0 ? readback_bytes / read_GBps * 1e-3
                                           : burstgap::read_blocked_drain_ns(link, readback_bytes) * 1e-3;
  return std::max(compute_us, link_free + ranks * ranks * op_us) + readback_us;
}

namespace {
// One order on rank 0's SMs: its compute (the ticket simulation) and its forward with the
// drain (the other ranks alike): the local experts with L2 tiles, each with its tiles' end
// in that order and its copies; the rows the combine reads back. The grouping of the
// fastest prediction, fewest experts per copy on a tie.
struct DrainPrediction {
  double compute_us = 0, us = 0;
  int experts_per_copy = 1;
};
DrainPrediction predict_drain(const HostLinkRow& row, const ScheduleConfig& order, const Problem& p,
                              const Layout& layout, const TileLists& tiles, int blocks, const TileTimeModel& time,
                              const burstgap::ModelParams& params) {
  std::vector<double> l2_end;
  const double compute_ns = order_time_ns(p, tiles, make_scheduler(order)->order(tiles), blocks, time, &l2_end);
  const RankLayout& R = layout.ranks[0];
  const int epr = p.experts_per_rank();
  std::vector<DrainExpertCost> experts;
  for (int e = 0; e < epr; ++e)
    if (R.count(e) > 0) experts.push_back({l2_end[e] * 1e-3, drain_copies(R, e, p.ranks)});
  long long remote_rows = 0;
  for (int d : R.send_rank) remote_rows += d != 0;
  const double row_bytes = double(p.hidden) * sizeof(bf16_bits);
  DrainPrediction best{compute_ns * 1e-3};
  for (int g = 1;; g = std::min(2 * g, epr)) {
    const double us = predict_drain_us(best.compute_us, experts, g, row_bytes, p.ranks,
                                       double(p.ranks) * remote_rows * row_bytes, row.copy, row.read_GBps, params);
    if (best.us == 0 || us < best.us) best.us = us, best.experts_per_copy = g;
    if (g == epr) break;
  }
  return best;
}
}  // namespace

void predict_host_link_row(HostLinkRow& row, const burstgap::ModelParams& params, int sms) {
  const Problem p = row.config.problem();
  const auto routing = synthetic_routing(p, row.config.synthetic());
  const Layout layout = build_layout(p, routing);
  const TileLists tiles = build_tiles(p, layout.ranks[0]);
  const int blocks = std::max(1, sms / p.ranks);  // OneGpuGroup's default per rank
  const TileTimeModel time;
  const double combine_bytes = host_link_combine_bytes(row.config);
  const double blocked_us = burstgap::read_blocked_drain_ns(params, combine_bytes) * 1e-3;
  // Either order's stall is the combine's bytes at D: the stage holds the mainloops' reads
  // while it drains, whatever the order. (The advisor's issue stall for the orders' bursts,
  // widened to the P ranks, was also taken where larger: it counts every L2 tile as full
  // and predicted Expert-Wave 1.2-2.2x too slow at 128-512 tokens, where the forward is
  // the compute and the few rows cost little.) The advisor still picks Interleaved's
  // wave, lag and split.
  row.interleaved = choose_schedule(ScheduleKind::interleaved, p, tiles, blocks, params, time);
  row.predicted_stall_expert_wave_us = blocked_us;
  row.predicted_stall_interleaved_us = blocked_us;
  // Each order once on `blocks` SMs: its compute, and its forward with the drain.
  ScheduleConfig expert_wave = row.interleaved;
  expert_wave.kind = ScheduleKind::expert_wave;
  const DrainPrediction il = predict_drain(row, row.interleaved, p, layout, tiles, blocks, time, params);
  const DrainPrediction ew = predict_drain(row, expert_wave, p, layout, tiles, blocks, time, params);
  row.predicted_compute_us = ew.compute_us;
  row.predicted_compute_interleaved_us = il.compute_us;
  // With SM stores every rank's combine rows are in host memory, read back over the link.
  // Here the reads stay at D, unlike the drain's (read_GBps): this forward's stall term
  // charges the bytes at D in full although the stores partly overlap the compute
  // (measured 0.87x the prediction, median), and the transport margin was set on that
  // sum; the reads at the read rate here too re-predicted the stored rows worse.
  const double readback_us = blocked_us;
  row.predicted_expert_wave_us = row.predicted_compute_us + row.predicted_stall_expert_wave_us + readback_us;
  row.predicted_interleaved_us =
      row.predicted_compute_interleaved_us + row.predicted_stall_interleaved_us + readback_us;
  // With the drain the stage's stall is gone and the order decides when each expert's
  // rows can leave: Expert-Wave ends its experts' L2 tiles a wave at a time, Interleaved
  // lags them by `lag` waves. Which drain is faster depends on the rank's SMs (measured,
  // the Expert-Wave one at P = 8 in most rows, the Interleaved one at P = 2), so both are
  // predicted; Interleaved's is taken only where predicted faster by more than the
  // model's error on their ratio (kDrainOrderMargin).
  row.predicted_drain_us = il.us;
  row.predicted_drain_expert_wave_us = ew.us;
  const bool il_order = il.us < (1 - kDrainOrderMargin) * ew.us;
  row.drain_experts_per_copy = il_order ? il.experts_per_copy : ew.experts_per_copy;
  // Interleaved with SM stores only where it wins by more than the model's error on the
  // two orders' ratio (kSmOrderMargin); the drain is still weighed against the faster one.
  const bool il_stores = row.predicted_interleaved_us < (1 - kSmOrderMargin) * row.predicted_expert_wave_us;
  const double stores_us = std::min(row.predicted_interleaved_us, row.predicted_expert_wave_us);
  const bool drain = (il_order ? il.us : ew.us) < (1 - kDrainMargin) * stores_us;
  row.schedule = drain ? (il_order ? "drain" : "drain_expert_wave") : il_stores ? "sm_stores" : "expert_wave";
  row.predicted_speedup = row.predicted_expert_wave_us / row.predicted_advised_us();
}

ModelCheck check_expert_wave_predictions(const std::vector<HostLinkRow>& measured, const burstgap::ModelParams& params,
                                         int sms) {
  std::vector<double> then, now, then_err, now_err;
  for (const HostLinkRow& m : measured) {
    if (!m.correct) continue;
    then.push_back(m.expert_wave_us / m.predicted_expert_wave_us);
    HostLinkRow r;
    r.config = m.config;
    r.copy = m.copy;
    r.read_GBps = m.read_GBps;
    const int row_sms = m.sms > 0 ? m.sms : sms;
    XS_ASSERT(row_sms > 0,
              "MoE time-model check: a row ({} tokens, E {}, P {}) without its SM count; give the SM count of the "
              "GPU that measured it (host-link-results --sms)",
              m.config.tokens_per_rank, m.config.experts, m.config.ep);
    predict_host_link_row(r, params, row_sms);
    now.push_back(m.expert_wave_us / r.predicted_expert_wave_us);
    then_err.push_back(std::abs(m.predicted_speedup / m.speedup - 1));
    // The schedule the row measured, as this model predicts it.
    r.schedule = m.schedule;
    now_err.push_back(std::abs(r.predicted_expert_wave_us / r.predicted_advised_us() / m.speedup - 1));
  }
  ModelCheck c;
  if (!now.empty()) {
    c.at_measurement = common::summarize(then);
    c.current = common::summarize(now);
    c.speedup_error_at_measurement = common::summarize(then_err);
    c.speedup_error_current = common::summarize(now_err);
  }
  return c;
}

double host_link_combine_bytes(const BenchConfig& c) {
  return double(c.ep) * c.tokens_per_rank * c.topk * c.hidden * sizeof(bf16_bits);
}

nlohmann::json host_link_summary(const std::vector<HostLinkRow>& rows) {
  std::vector<double> where_stall, all, errors, win_predicted, win_measured, combine_GBps, drain, drain_order, stores,
      hiding, compute, hbm_order, hbm_order_error;
  std::size_t drain_chosen = 0, losing = 0, kept = 0;
  std::map<int, std::vector<double>> by_ep;
  for (const auto& r : rows) {
    if (!r.correct) continue;
    all.push_back(r.speedup);
    by_ep[r.config.ep].push_back(r.speedup);
    losing += r.speedup < 1 - kLossTolerance;
    stores.push_back(r.expert_wave_us / r.interleaved_us);
    drain_chosen += r.drained();
    kept += r.kept_expert_wave();
    if (r.interleaved_drain_us > 0 && r.expert_wave_drain_us > 0) {
      drain.push_back(r.expert_wave_us / r.interleaved_drain_us);
      drain_order.push_back(r.expert_wave_drain_us / r.interleaved_drain_us);
    }
    errors.push_back(std::abs(r.predicted_speedup - r.speedup) / r.speedup);
    if (r.predicted_stall_expert_wave_us > 0.01 * r.predicted_compute_us) where_stall.push_back(r.speedup);
    if (r.predicted_speedup >= 1.1) win_predicted.push_back(r.predicted_speedup), win_measured.push_back(r.speedup);
    if (r.expert_wave_us > 0) combine_GBps.push_back(host_link_combine_bytes(r.config) / (r.expert_wave_us * 1e3));
    if (r.expert_wave_hbm_us > 0) {
      hiding.push_back(r.expert_wave_us / r.expert_wave_hbm_us);
      compute.push_back(r.expert_wave_hbm_us / r.predicted_compute_us);
    }
    if (r.expert_wave_hbm_us > 0 && r.interleaved_hbm_us > 0) {
      const double measured = r.expert_wave_hbm_us / r.interleaved_hbm_us;
      hbm_order.push_back(measured);
      hbm_order_error.push_back(std::abs(r.predicted_compute_us / r.predicted_compute_interleaved_us / measured - 1));
    }
  }
  auto or_null = [](bool ok, double v) { return ok ? nlohmann::json(v) : nlohmann::json(nullptr); };
  const bool any = !all.empty(), win = !win_predicted.empty(), timed = !combine_GBps.empty(), drained = !drain.empty();
  nlohmann::json geomean_by_ep = nlohmann::json::object();
  for (const auto& [ep, v] : by_ep) geomean_by_ep[std::to_string(ep)] = bench::geomean(v);
  return {{"rows_where_stall_predicted", where_stall.size()},
          {"rows_losing_more_than_3_percent", losing},
          {"geomean_by_ep", geomean_by_ep},
          {"rows_where_drain_chosen", drain_chosen},
          {"rows_where_expert_wave_kept", kept},
          {"sm_stores_interleaved_over_expert_wave_geomean", or_null(any, any ? bench::geomean(stores) : 0)},
          {"rows_with_drain", drain.size()},
          {"drain_interleaved_over_expert_wave_geomean", or_null(drained, bench::geomean(drain))},
          {"drain_interleaved_over_expert_wave_max",
           or_null(drained, drained ? *std::max_element(drain.begin(), drain.end()) : 0)},
          {"drain_interleaved_over_drain_expert_wave_geomean", or_null(drained, bench::geomean(drain_order))},
          {"geomean_where_stall_predicted", or_null(!where_stall.empty(), bench::geomean(where_stall))},
          {"max_speedup", or_null(any, any ? *std::max_element(all.begin(), all.end()) : 0)},
          {"min_speedup", or_null(any, any ? *std::min_element(all.begin(), all.end()) : 0)},
          {"speedup_prediction_median_abs_rel_error", or_null(any, any ? common::median(errors) : 0)},
          {"rows_where_win_predicted", win_predicted.size()},
          {"predicted_geomean_where_win_predicted", or_null(win, bench::geomean(win_predicted))},
          {"geomean_where_win_predicted", or_null(win, bench::geomean(win_measured))},
          {"combine_GBps_median", or_null(timed, timed ? common::median(combine_GBps) : 0)},
          {"combine_GBps_max",
           or_null(timed, timed ? *std::max_element(combine_GBps.begin(), combine_GBps.end()) : 0)},
          // Expert-Wave over the link against in HBM: what hiding every combine byte gives;
          // and the HBM forward against the ticket simulation's compute.
          {"hiding_bound_geomean", or_null(!hiding.empty(), bench::geomean(hiding))},
          {"hbm_over_predicted_compute_median",
           or_null(!compute.empty(), compute.empty() ? 0 : common::median(compute))},
          // The two orders in HBM: Interleaved's gain without the link, and the ticket
          // simulation's error on it.
          {"hbm_interleaved_over_expert_wave_geomean", or_null(!hbm_order.empty(), bench::geomean(hbm_order))},
          {"hbm_order_prediction_median_abs_rel_error",
           or_null(!hbm_order.empty(), hbm_order.empty() ? 0 : common::median(hbm_order_error))}};
}

HostLinkRow host_link_row_from_json(const nlohmann::json& r) {
  auto i = [&](const char* k) { return r.at(k).get<int>(); };
  auto d = [&](const char* k) { return r.at(k).get<double>(); };
  HostLinkRow m;
  m.config = {.tokens_per_rank = i("tokens_per_rank"), .experts = i("experts"), .topk = i("topk"),
              .hidden = i("hidden"), .intermediate = i("intermediate"), .ep = i("ep"),
              .routing = r.at("routing").get<std::string>()};
  m.expert_wave_us = d("expert_wave_us");
  m.interleaved_us = d("interleaved_us");
  m.speedup = d("speedup");
  // Rows measured before the combine drain: Interleaved with SM stores was the schedule.
  m.schedule = r.value("schedule", std::string("sm_stores"));
  m.advised_us = r.value("advised_us", m.interleaved_us);
  m.predicted_compute_us = d("predicted_compute_us");
  // Files written before the order simulation predicted one compute time for both orders.
  m.predicted_compute_interleaved_us = r.value("predicted_compute_interleaved_us", m.predicted_compute_us);
  m.predicted_stall_expert_wave_us = d("predicted_stall_expert_wave_us");
  m.predicted_stall_interleaved_us = d("predicted_stall_interleaved_us");
  m.predicted_speedup = d("predicted_speedup");
  // Rows measured before the combine drain have no drain times (0: not measured), and
  // predicted each order as compute + stall.
  m.expert_wave_drain_us = r.value("expert_wave_drain_us", 0.0);
  m.interleaved_drain_us = r.value("interleaved_drain_us", 0.0);
  m.expert_wave_hbm_us = r.value("expert_wave_hbm_us", 0.0);
  m.interleaved_hbm_us = r.value("interleaved_hbm_us", 0.0);
  m.predicted_expert_wave_us =
      r.value("predicted_expert_wave_us", m.predicted_compute_us + m.predicted_stall_expert_wave_us);
  m.predicted_interleaved_us =
      r.value("predicted_interleaved_us", m.predicted_compute_interleaved_us + m.predicted_stall_interleaved_us);
  m.predicted_drain_us = r.value("predicted_drain_us", 0.0);
  m.predicted_drain_expert_wave_us = r.value("predicted_drain_expert_wave_us", 0.0);
  m.copy = {r.value("copy_op_us", 0.0) * 1e-3, r.value("copy_GBps", 0.0)};
  m.read_GBps = r.value("read_GBps", kH200HostReadGBps);  // rows of older benches: the H200 rate
  m.sms = r.value("sms", 0);  // rows of older benches have none
  m.correct = r.at("correct").get<bool>();
  return m;
}

void predict_host_link_sweep(const SweepOptions& o) {
  const auto params = burstgap::read_params_or_default(o.params);
  const burstgap::ModelParams& host = params.find("host", "st16");
  const std::vector<BenchConfig> configs = select_rows(o.sweep, o.filter);
  nlohmann::json rows = nlohmann::json::array();
  std::vector<double> where_stall;
  double best = 0;
  fmt::print("| tokens | E | k | hidden | I | P | routing | compute EW us | stall EW us | EW us | IL stores us | "
             "IL drain us | EW drain us | advised | EW over advised | IL wave / lag / split |\n"
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const BenchConfig& c : configs) {
    HostLinkRow r;
    r.config = c;
    r.copy = kH200CopyCosts;
    r.read_GBps = kH200HostReadGBps;
    predict_host_link_row(r, host, o.sms);
    const bool stall = r.predicted_stall_expert_wave_us > 0.01 * r.predicted_compute_us;
    if (stall) where_stall.push_back(r.predicted_speedup);
    best = std::max(best, r.predicted_speedup);
    fmt::print("| {} | {} | {} | {} | {} | {} | {} | {:.0f} | {:.0f} | {:.0f} | {:.0f} | {:.0f} | {:.0f} | {} | "
               "{:.3f} | {} / {} / {} |\n",
               c.tokens_per_rank, c.experts, c.topk, c.hidden, c.intermediate, c.ep, c.routing, r.predicted_compute_us,
               r.predicted_stall_expert_wave_us, r.predicted_expert_wave_us, r.predicted_interleaved_us,
               r.predicted_drain_us, r.predicted_drain_expert_wave_us, r.schedule, r.predicted_speedup,
               r.interleaved.wave_experts, r.interleaved.lag, r.interleaved.burst_split);
    rows.push_back({{"tokens_per_rank", c.tokens_per_rank}, {"experts", c.experts}, {"topk", c.topk},
                    {"hidden", c.hidden}, {"intermediate", c.intermediate}, {"ep", c.ep}, {"routing", c.routing},
                    {"predicted_compute_us", r.predicted_compute_us},
                    {"predicted_compute_interleaved_us", r.predicted_compute_interleaved_us},
                    {"predicted_stall_expert_wave_us", r.predicted_stall_expert_wave_us},
                    {"predicted_stall_interleaved_us", r.predicted_stall_interleaved_us},
                    {"predicted_expert_wave_us", r.predicted_expert_wave_us},
                    {"predicted_interleaved_us", r.predicted_interleaved_us},
                    {"predicted_drain_us", r.predicted_drain_us},
                    {"predicted_drain_expert_wave_us", r.predicted_drain_expert_wave_us},
                    {"drain_experts_per_copy", r.drain_experts_per_copy}, {"schedule", r.schedule}, {"sms", o.sms},
                    {"predicted_speedup", r.predicted_speedup},
                    {"interleaved_config",
                     {{"wave_experts", r.interleaved.wave_experts}, {"lag", r.interleaved.lag},
                      {"burst_split", r.interleaved.burst_split}}}});
  }
  double log_sum = 0;
  for (double x : where_stall) log_sum += std::log(x);
  const double geomean = where_stall.empty() ? 0 : std::exp(log_sum / where_stall.size());
  fmt::print("predicted Expert-Wave over the advisor's schedule: {} of {} rows with an Expert-Wave stall, "
             "geomean {:.3f} there; maximum {:.3f} ({} SMs, fit {}/{}, copy engine {:.1f} GB/s and {:.1f} us per operation, "
             "reads back at {:.1f} GB/s)\n",
             where_stall.size(), configs.size(), geomean, best, o.sms, host.pattern, host.store, kH200CopyCosts.GBps,
             kH200CopyCosts.op_ms * 1e3, kH200HostReadGBps);
  if (o.json.empty()) return;
  const nlohmann::json out = {{"what", "the model's side of `xstage bench moe --link host`: predictions, nothing measured"},
                              {"command", o.command},
                              {"sms", o.sms},
                              {"rows_where_stall_predicted", where_stall.size()},
                              {"predicted_geomean_where_stall", geomean},
                              {"predicted_max_speedup", best},
                              {"rows", rows}};
  common::write_file_atomic(o.json, out.dump(1) + "\n");
}

}  // namespace xstage::moe
