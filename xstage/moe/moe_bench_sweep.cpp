// The whole `xstage bench moe`: the selected rows of a sweep through run_bench, one
// table line each, the results file rewritten after every row (so a run cut short by
// --budget-s or a kill keeps what it measured), then the speedup PNG. Means and
// maxima are over the rows whose check passed: a wrong row is never counted as fast.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include "common/check.hpp"
#include "common/plot.hpp"
#include "common/stats.hpp"
#include "xstage/bench/moe_bench.hpp"
#include "xstage/bench/report.hpp"

namespace xstage::moe {

namespace {

// The kernel's phase shares (KernelProfile) as a row's JSON.
nlohmann::json profile_json(const KernelProfile& k) {
  return {{"launches", k.launches},
          {"items_per_warpgroup", k.items_per_warpgroup},
          {"consumer_shares",
           {{"start", k.start}, {"item_wait", k.item_wait}, {"mainloop", k.mainloop}, {"stage_wait", k.stage_wait},
            {"epilogue", k.epilogue}, {"combine_wait", k.combine_wait}, {"combine", k.combine}}},
          {"producer_shares",
           {{"dispatch_first", k.producer_dispatch_first}, {"dependency", k.producer_dependency},
            {"ring", k.producer_ring}}},
          {"total_us_at_peak_clock", k.total_us}};
}

bench::Table moe_table(bool device_routing) {
  bench::Table t({{"T", 5}, {"E", 5}, {"k", 3}, {"hid", 5}, {"I", 5}, {"P", 2}, {"routing", 7, "", true},
                  {"EW us", 9, ".1f", false, true}, {"IL us", 9, ".1f"}, {"unf us", 9, ".1f"},
                  {"IL/EW", 6, ".3f", false, true}, {"TFLOPs", 7, ".1f"}, {"cuBLAS TF", 9, ".1f"},
                  {"F/cuBLAS", 8, ".3f"}, {"F/unf", 6, ".3f"}, {"NVL GB/s", 8, ".1f"}, {"ok", 0}});
  if (device_routing)
    t.add({"logits us", 9, ".1f", false, true}).add({"plan us", 7, ".1f"}).add({"eq", 3});
  return t;
}

bench::Row to_row(const BenchRow& r, const BenchOptions& o) {
  const BenchConfig& b = r.config;
  bench::Row row;
  row.check = {r.correct, r.correct ? "" : fmt::format("max rel err {:.2e}{}", r.max_rel_err,
                                                        o.device_routing && !r.from_logits_bitwise
                                                            ? ", forward from logits differs from host routing"
                                                            : "")};
  row.config = {{"tokens_per_rank", b.tokens_per_rank}, {"experts", b.experts}, {"topk", b.topk},
                {"hidden", b.hidden}, {"intermediate", b.intermediate}, {"ep", b.ep}, {"routing", b.routing}};
  row.values = {{"expert_wave_us", r.expert_wave_us}, {"interleaved_us", r.interleaved_us},
                {"unfused_us", r.unfused_us}, {"grouped_gemm_us", r.grouped_gemm_us},
                {"unfused_gemm", r.unfused_gemm}, {"speedup", r.speedup},
                {"predicted_order_speedup", r.predicted_order_speedup},
                {"fused_over_unfused", r.fused_over_unfused}, {"tflops", r.tflops}, {"gemm_tflops", r.gemm_tflops},
                {"cublas_us", r.cublas_us}, {"cublas_tflops", r.cublas_tflops}, {"cublas_form", r.cublas_form},
                {"fused_over_cublas", r.fused_over_cublas}, {"cublas_exact_us", r.cublas_exact_us},
                {"fused_over_cublas_exact", r.fused_over_cublas_exact}, {"nvlink_GBps", r.nvlink_GBps},
                {"max_rel_err", r.max_rel_err}, {"raster_group", kMoeRasterGroup},
                {"fused_blocks", o.blocks > 0 ? nlohmann::json(o.blocks) : nlohmann::json("one per SM")},
                {"interleaved_config",
                 {{"wave_experts", r.interleaved.wave_experts}, {"lag", r.interleaved.lag},
                  {"burst_split", r.interleaved.burst_split}, {"reason", r.interleaved.reason}}}};
  row.cells = {b.tokens_per_rank, b.experts, b.topk, b.hidden, b.intermediate, b.ep, b.routing,
               r.expert_wave_us, r.interleaved_us, r.unfused_us, r.speedup, r.tflops, r.cublas_tflops,
               r.fused_over_cublas, r.fused_over_unfused, r.nvlink_GBps, std::string(r.correct ? "yes" : "NO")};
  if (r.profiled) row.values["profile"] = profile_json(r.profile);
  if (!o.device_routing) return row;
  const double* ph = r.planner_phase_us;
  row.values["from_logits"] = {
      {"us", r.from_logits_us},
      {"planner_us", r.planner_us},
      {"bitwise_equal_to_host_routed", r.from_logits_bitwise},
      {"planner_phase_us",
       {{"topk", ph[0]}, {"allgather", ph[1]}, {"count", ph[2]}, {"scan", ph[3]}, {"order", ph[4]}, {"assign", ph[5]}}},
      {"config",
       {{"wave_experts", r.from_logits_config.wave_experts}, {"lag", r.from_logits_config.lag},
        {"burst_split", r.from_logits_config.burst_split}}}};
  row.cells.insert(row.cells.end(), {r.from_logits_us, r.planner_us, std::string(r.from_logits_bitwise ? "yes" : "NO")});
  return row;
}

// The checked rows' figures, for the summary and the chart (x: the row's index).
struct Curves {
  std::vector<double> x, speedup, from_logits, planner_share;
  std::vector<double> order_prediction_error;  // |predicted / measured Interleaved over Expert-Wave - 1|
  std::map<std::string, std::vector<double>> over_unfused;                 // by routing
  std::map<std::string, std::map<int, std::vector<double>>> over_cublas;  // by routing, then tokens per rank
  std::map<std::string, std::map<int, std::vector<double>>> over_cublas_exact;  // the same, own row counts
  double max_speedup = 0;
  void add(double i, const BenchRow& r) {
    x.push_back(i);
    speedup.push_back(r.speedup);
    order_prediction_error.push_back(std::abs(r.predicted_order_speedup / r.speedup - 1));
    over_unfused[r.config.routing].push_back(r.fused_over_unfused);
    over_cublas[r.config.routing][r.config.tokens_per_rank].push_back(r.fused_over_cublas);
    if (r.fused_over_cublas_exact > 0)
      over_cublas_exact[r.config.routing][r.config.tokens_per_rank].push_back(r.fused_over_cublas_exact);
    max_speedup = std::max(max_speedup, r.speedup);
    if (!r.device_routing) return;
    from_logits.push_back(r.interleaved_us / r.from_logits_us);
    planner_share.push_back(1.0 - r.planner_us / r.from_logits_us);
  }
};

void write_png(const Curves& c, const std::string& card, const std::string& png) {
  namespace plot = common::plot;
  plot::Chart chart;
  chart.title = fmt::format("MoE Interleaved / Expert-Wave ({}, geomean {:.2f}x)", card, bench::geomean(c.speedup));
  chart.x.label = "configuration";
  chart.y.label = "speedup";
  chart.series.push_back({.label = "Interleaved / Expert-Wave", .x = c.x, .y = c.speedup, .line = plot::LineStyle::none});
  if (!c.from_logits.empty()) {
    chart.series.push_back({.label = "host-routed Interleaved / forward from logits (GPU routing)", .x = c.x,
                            .y = c.from_logits, .line = plot::LineStyle::none});
    chart.series.push_back({.label = "1 - planner / forward from logits", .x = c.x, .y = c.planner_share,
                            .line = plot::LineStyle::none});
  }
  chart.series.push_back(plot::horizontal_line("1x", 1.0, c.x.front(), c.x.back()));
  plot::write_chart(chart, png);
  std::printf("wrote %s\n", png.c_str());
}

bench::Table host_link_table() {
  return bench::Table({{"T", 5}, {"E", 5}, {"k", 3}, {"hid", 5}, {"I", 5}, {"P", 2}, {"routing", 7, "", true},
                       {"EW us", 9, ".1f", false, true}, {"IL us", 9, ".1f"}, {"EW dr us", 9, ".1f"},
                       {"IL dr us", 9, ".1f"}, {"EW HBM us", 9, ".1f"}, {"advised", 17, "", false, true},
                       {"EW/adv", 6, ".3f"}, {"pred x", 6, ".3f"}, {"ok", 0}});
}

bench::Row host_link_row(const HostLinkRow& r) {
  const BenchConfig& b = r.config;
  bench::Row row;
  row.check = {r.correct, r.correct ? "" : fmt::format("Interleaved vs Expert-Wave max rel err {:.2e}, or a drained "
                                                       "or HBM output not bitwise equal to its order's SM stores",
                                                       r.max_rel_err)};
  row.config = {{"tokens_per_rank", b.tokens_per_rank}, {"experts", b.experts}, {"topk", b.topk},
                {"hidden", b.hidden}, {"intermediate", b.intermediate}, {"ep", b.ep}, {"routing", b.routing}};
  row.values = {{"expert_wave_us", r.expert_wave_us}, {"interleaved_us", r.interleaved_us},
                {"expert_wave_drain_us", r.expert_wave_drain_us}, {"interleaved_drain_us", r.interleaved_drain_us},
                {"expert_wave_hbm_us", r.expert_wave_hbm_us}, {"interleaved_hbm_us", r.interleaved_hbm_us},
                {"schedule", r.schedule}, {"advised_us", r.advised_us},
                {"speedup", r.speedup},
                {"predicted_stall_expert_wave_us", r.predicted_stall_expert_wave_us},
                {"predicted_stall_interleaved_us", r.predicted_stall_interleaved_us},
                {"predicted_compute_us", r.predicted_compute_us},
                {"predicted_compute_interleaved_us", r.predicted_compute_interleaved_us},
                {"predicted_expert_wave_us", r.predicted_expert_wave_us},
                {"predicted_interleaved_us", r.predicted_interleaved_us}, {"predicted_drain_us", r.predicted_drain_us},
                {"predicted_drain_expert_wave_us", r.predicted_drain_expert_wave_us},
                {"drain_experts_per_copy", r.drain_experts_per_copy}, {"sms", r.sms},
                {"predicted_speedup", r.predicted_speedup}, {"copy_op_us", r.copy.op_ms * 1e3},
                {"copy_GBps", r.copy.GBps}, {"read_GBps", r.read_GBps}, {"max_rel_err", r.max_rel_err},
                {"interleaved_config",
                 {{"wave_experts", r.interleaved.wave_experts}, {"lag", r.interleaved.lag},
                  {"burst_split", r.interleaved.burst_split}, {"reason", r.interleaved.reason}}}};
  row.cells = {b.tokens_per_rank, b.experts, b.topk, b.hidden, b.intermediate, b.ep, b.routing,
               r.expert_wave_us, r.interleaved_us, r.expert_wave_drain_us, r.interleaved_drain_us,
               r.expert_wave_hbm_us, r.schedule,
               r.speedup, r.predicted_speedup, std::string(r.correct ? "yes" : "NO")};
  if (r.profiled)
    row.values["profile"] = {{"expert_wave", profile_json(r.profile_expert_wave)},
                             {"interleaved", profile_json(r.profile_interleaved)}};
  return row;
}

// The results file of a sweep. `--sweep one` (EP = 1) adds its rows to the file's other
// rows (the multi-GPU runs'), whose head stays: its own keys are one_gpu_*.
bench::ResultsFile sweep_file(const SweepOptions& o, const std::string& card, int gpus) {
  if (o.sweep != "one") return bench::ResultsFile(o.json, bench::run_head(card, gpus, o.command));
  bench::ResultsFile f(o.json, {{"one_gpu_card", card}, {"one_gpu_date", bench::today_utc()},
                                {"one_gpu_command", o.command}});
  f.keep_other_rows(config_key, true);
  return f;
}

// {"tokens": geomean} of rows grouped by tokens per rank.
nlohmann::json geomean_by_tokens(const std::map<int, std::vector<double>>& rows) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [tokens, v] : rows) out[std::to_string(tokens)] = bench::geomean(v);
  return out;
}

// The head's summary after each row: Interleaved / Expert-Wave (multi-GPU sweeps), or
// fused over cuBLAS by tokens and over the unfused path (`one`): uniform routing's under
// the plain keys, another routing's with its name appended. A routing this run did not
// measure keeps the figures the file has.
void set_summary(bench::Report& report, const SweepOptions& o, const Curves& c) {
  if (!c.order_prediction_error.empty())
    report.set("order_prediction_median_abs_rel_error", common::median(c.order_prediction_error));
  if (o.sweep != "one") {
    report.set("geomean_speedup", bench::geomean(c.speedup));
    report.set("max_speedup", c.max_speedup);
    return;
  }
  for (const auto& [routing, by_tokens] : c.over_cublas) {
    const std::string suffix = routing == "uniform" ? "" : "_" + routing;
    report.set("fused_over_cublas_geomean" + suffix, geomean_by_tokens(by_tokens));
    if (const auto e = c.over_cublas_exact.find(routing); e != c.over_cublas_exact.end())
      report.set("fused_over_cublas_exact_geomean" + suffix, geomean_by_tokens(e->second));
    report.set("one_gpu_fused_over_unfused_geomean" + suffix, bench::geomean(c.over_unfused.at(routing)));
  }
}

}  // namespace

void run_host_link_sweep(const SweepOptions& o) {
  const auto params = burstgap::read_params_or_default(o.params);
  const burstgap::ModelParams& host = params.find("host", "st16");
  const auto configs = select_rows(o.sweep, o.filter);
  const bench::Budget budget(o.budget_s);
  cudaDeviceProp prop{};
  XS_ASSERT(cudaGetDeviceProperties(&prop, 0) == cudaSuccess, "bench moe: no CUDA device");
  nlohmann::json head = bench::run_head(prop.name, 1, o.command);
  head["timed"] = "one GPU: the P ranks at once (OneGpuGroup, SMs / P CTAs each), combine rows in mapped pinned host "
                  "memory, dispatch rows and counters in HBM; per forward, the slowest rank; medians of samples taken in turns";
  head["params"] = nlohmann::json::parse(burstgap::params_to_json({.groups = {host}}));
  bench::Report report(host_link_table(), bench::ResultsFile(o.json, head), configs.size());
  report.print_header();
  std::vector<HostLinkRow> rows;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    if (budget.spent()) {
      std::printf("budget of %.0f s spent after %zu of %zu configurations: stopping\n", o.budget_s, i, configs.size());
      break;
    }
    rows.push_back(run_host_link_bench(configs[i], host, o.bench));
    report.set("summary", host_link_summary(rows));
    report.add(host_link_row(rows.back()));
  }
  const nlohmann::json sum = host_link_summary(rows);
  std::printf("Expert-Wave over the advisor's schedule over the host link: %s\n", sum.dump().c_str());
  report.finish();
}

void run_sweep(const SweepOptions& o) {
  const auto params = burstgap::read_params_or_default(o.params);
  const auto configs = select_rows(o.sweep, o.filter);
  const bench::Budget budget(o.budget_s);
  cudaDeviceProp prop{};
  XS_ASSERT(cudaGetDeviceProperties(&prop, 0) == cudaSuccess, "bench moe: no CUDA device");
  int gpus = 0;
  cudaGetDeviceCount(&gpus);
  bench::Report report(moe_table(o.bench.device_routing), sweep_file(o, prop.name, gpus), configs.size());
  if (o.sweep == "one") report.status_prefix("one_gpu_");
  report.print_header();
  Curves curves;
  nlohmann::json measured = {{"one_gpu_card", prop.name}, {"rows", nlohmann::json::array()}};  // `one`: the heatmap's
  for (std::size_t i = 0; i < configs.size(); ++i) {
    if (budget.spent()) {
      std::printf("budget of %.0f s spent after %zu of %zu configurations: stopping\n", o.budget_s, i, configs.size());
      break;
    }
    const BenchRow r = run_bench(configs[i], params.for_exchange(configs[i].ep), o.bench);
    if (r.correct) curves.add(double(i), r);
    set_summary(report, o, curves);
    const bench::Row row = to_row(r, o.bench);
    if (o.sweep == "one") measured["rows"].push_back(row.json());
    report.add(row);
  }
  std::printf("geometric mean Interleaved/Expert-Wave %.3fx, maximum %.3fx over %zu configurations%s\n",
              bench::geomean(curves.speedup), curves.max_speedup, curves.x.size(),
              report.all_correct() ? "" : " (SOME OUTPUTS WRONG: left out of the means)");
  if (!curves.order_prediction_error.empty())
    std::printf("Interleaved / Expert-Wave predicted by the order simulation: median error %.1f%% over %zu rows\n",
                100 * common::median(curves.order_prediction_error), curves.order_prediction_error.size());
  for (const auto& [routing, by_tokens] : curves.over_cublas) {
    for (const auto& [tokens, v] : by_tokens)
      std::printf("fused / cuBLAS expert GEMMs, %s routing, %d tokens: geomean %.3f over %zu shapes\n",
                  routing.c_str(), tokens, bench::geomean(v), v.size());
    const auto& u = curves.over_unfused.at(routing);
    std::printf("fused / unfused path, %s routing: geomean %.3f over %zu rows\n", routing.c_str(), bench::geomean(u),
                u.size());
  }
  report.finish();
  if (o.png.empty() || curves.x.empty()) return;
  if (o.sweep == "one") {
    write_cublas_heatmap(measured, o.png);
    std::printf("wrote %s\n", o.png.c_str());
  } else {
    write_png(curves, prop.name, o.png);
  }
}

}  // namespace xstage::moe
