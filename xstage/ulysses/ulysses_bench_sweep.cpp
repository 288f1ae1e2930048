// The sweeps of `xstage bench ulysses`: the fused post-attention All-to-All against the
// serial, coarse-overlap and PyTorch-like serial paths (run_sweep), and --kernel-only's
// share of one rank on one GPU (run_kernel_sweep). One table line per configuration,
// the results file rewritten after every row.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <map>

#include "common/check.hpp"
#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "common/plot.hpp"
#include "xstage/attention/attention_cuda.hpp"
#include "xstage/bench/report.hpp"
#include "xstage/bench/ulysses_bench.hpp"
#include "xstage/comm/comm.hpp"
#ifdef XSTAGE_HAVE_TORCH_BASELINES
#include "sdpa_baseline.hpp"
#endif

namespace xstage::ulysses {

namespace {

// PyTorch-like serial: the best SDPA backend on the rank's gathered [1, S, H/P, D]
// problem (device 0); the caller adds this row's measured exchange back. -1: none.
double sdpa_best_ms(const Problem& p, bool torch) {
#ifdef XSTAGE_HAVE_TORCH_BASELINES
  if (!torch) return -1;
  using namespace attention;
  XS_CHECK_CUDA(cudaSetDevice(0));
  const int64_t S = p.seq, H = p.heads_per_rank(), D = p.head_dim, n = S * H * D;
  DeviceBuffer<std::uint16_t> q(n), k(n), v(n), o(n);
  fill_random_bf16(q.get(), n, 11, 1.0f);
  fill_random_bf16(k.get(), n, 12, 1.0f);
  fill_random_bf16(v.get(), n, 13, 1.0f);
  FwdArgs a;
  a.q = Tensor4::bshd(q.get(), 1, S, H, D);
  a.k = Tensor4::bshd(k.get(), 1, S, H, D);
  a.v = Tensor4::bshd(v.get(), 1, S, H, D);
  a.o = Tensor4::bshd(o.get(), 1, S, H, D);
  double best = -1;
  for (const char* backend : {"flash", "cudnn"}) {
    const auto r = baseline::time_sdpa(backend, a, 2, 5, 200, false);
    if (r.ok && (best < 0 || r.median_ms < best)) best = r.median_ms;
  }
  return best;
#else
  (void)p;
  (void)torch;
  return -1;
#endif
}

std::string card_name() {
  cudaDeviceProp prop{};
  XS_CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  return prop.name;
}

void check_ranks(const std::vector<int>& ranks) {
  for (int P : ranks)
    XS_ASSERT(P >= 2 && P <= kMaxRanks, "bench ulysses: --ranks {} is outside 2 .. {}", P, kMaxRanks);
}

std::vector<BenchConfig> configs_of(const SweepOptions& o, const std::vector<int>& ranks) {
  auto configs = bench_sweep(ranks, o.min_seq, o.max_seq);
  XS_ASSERT(!configs.empty(), "bench ulysses: no configuration with S in [{}, {}]", o.min_seq, o.max_seq);
  return configs;
}

nlohmann::json config_json(const BenchConfig& b) {
  return {{"S", b.seq}, {"P", b.ranks}, {"H", b.heads}, {"D", b.head_dim}};
}

std::vector<bench::Cell> config_cells(const BenchConfig& b) {
  return {(long long)b.seq, (long long)b.ranks, (long long)b.heads, (long long)b.head_dim};
}

const std::vector<bench::Column> kConfigColumns = {{"S", 6}, {"P", 2}, {"H", 3}, {"D", 4}};

bench::Table sweep_table() {
  bench::Table t(kConfigColumns);
  bool first = true;
  for (const char* h : {"attn", "serial", "torch", "coarse", "fusedS", "fusedR", "cta-sig", "slice-sig", "agent-sig",
                        "loopback", "attn-ord"}) {
    t.add({h, 8, ".3f", false, first});
    first = false;
  }
  t.add({"speedup", 6, ".3f", false, true}).add({"pred us", 8, ".1f", false, true}).add({"meas us", 8, ".1f"});
  return t.add({"GB/s", 7, ".1f", false, true}).add({"bitwise", 0, "", false, true});
}

bench::Row sweep_row(const BenchRow& r, double sdpa) {
  const double torch_ms = sdpa > 0 ? sdpa + (r.serial_ms - r.attention_ms) : NAN;
  bench::Row row;
  row.check = {r.fused_equal && r.coarse_equal, r.fused_equal ? "coarse != serial" : "fused != serial"};
  row.config = config_json(r.config);
  row.values = {{"pre_a2a_ms", r.pre_a2a_ms},
                {"attention_ms", r.attention_ms},
                {"serial_ms", r.serial_ms},
                {"torch_serial_ms", sdpa > 0 ? nlohmann::json(torch_ms) : nlohmann::json(nullptr)},
                {"torch_sdpa_ms", sdpa > 0 ? nlohmann::json(sdpa) : nlohmann::json(nullptr)},
                {"coarse_ms", r.coarse_ms},
                {"fused_sender_ms", r.fused_sender_ms},
                {"fused_receiver_ms", r.fused_receiver_ms},
                {"signal", r.signal},
                {"fused_per_cta_signal_ms", r.fused_per_cta_ms},
                {"fused_per_slice_signal_ms", r.fused_per_slice_ms},
                {"fused_by_agent_signal_ms", r.fused_by_agent_ms},
                {"fused_loopback_ms", r.fused_loopback_ms},
                {"attention_fused_order_ms", r.attention_fused_order_ms},
                {"speedup_vs_serial", r.speedup_vs_serial},
                {"predicted_stall_us", r.predicted_stall_us},
                {"measured_stall_us", r.measured_stall_us},
                {"nvlink_GBps", r.nvlink_GBps},
                {"fused_bitwise_equal_serial", r.fused_equal},
                {"coarse_bitwise_equal_serial", r.coarse_equal},
                {"order", r.order}};
  row.cells = config_cells(r.config);
  for (double v : {r.attention_ms, r.serial_ms, torch_ms, r.coarse_ms, r.fused_sender_ms, r.fused_receiver_ms,
                   r.fused_per_cta_ms, r.fused_per_slice_ms, r.fused_by_agent_ms, r.fused_loopback_ms,
                   r.attention_fused_order_ms, r.speedup_vs_serial, r.predicted_stall_us, r.measured_stall_us,
                   r.nvlink_GBps})
    row.cells.push_back(v);
  row.cells.push_back(std::string(r.fused_equal ? (r.coarse_equal ? "yes" : "fused yes, coarse NO") : "NO"));
  return row;
}

// Speedup over serial vs S, one curve per (P, H, D).
using Curves = std::map<std::string, std::pair<std::vector<double>, std::vector<double>>>;

void write_png(const Curves& curves, const std::string& card, int gpus, const std::string& png) {
  namespace plot = common::plot;
  plot::Chart chart;
  chart.title = fmt::format("Ulysses fused / serial ({}, {} GPUs)", card, gpus);
  chart.x.label = "S (tokens)";
  chart.x.scale = plot::Scale::log10;
  chart.y.label = "speedup over serial (sender-visible)";
  double x0 = INFINITY, x1 = 0;
  for (const auto& [label, xy] : curves) {
    chart.series.push_back({.label = label, .x = xy.first, .y = xy.second});
    x0 = std::min(x0, xy.first.front());
    x1 = std::max(x1, xy.first.back());
  }
  chart.series.push_back(plot::horizontal_line("1x", 1.0, x0, x1));
  plot::write_chart(chart, png);
  std::printf("wrote %s\n", png.c_str());
}

bench::Table kernel_table() {
  bench::Table t(kConfigColumns);
  bool first = true;
  for (const char* h : {"attn", "attn-ord", "loop-cta", "loop-sl", "loop-ag", "loop-hm"}) {
    t.add({h, 8, ".3f", false, first});
    first = false;
  }
  first = true;
  for (const char* h : {"ord", "cta", "slice", "agent", "hm"}) {
    t.add({h, 7, ".3f", false, first});
    first = false;
  }
  return t.add({"order bitwise, signal counts", 0, "", false, true});
}

bench::Row kernel_row(const KernelRow& r) {
  bench::Row row;
  row.check = {r.fused_order_equal && r.signal_counts_ok,
               r.fused_order_equal ? "signal counts" : "attention's output changed with the order"};
  row.config = config_json(r.config);
  row.values = {{"rank", r.rank}, {"attention_ms", r.attention_ms},
                {"attention_fused_order_ms", r.attention_fused_order_ms},
                {"loopback_per_cta_ms", r.loopback_per_cta_ms}, {"loopback_per_slice_ms", r.loopback_per_slice_ms},
                {"loopback_by_agent_ms", r.loopback_by_agent_ms}, {"loopback_head_major_ms", r.loopback_head_major_ms},
                {"fused_order_bitwise_equal", r.fused_order_equal}, {"signal_counts_ok", r.signal_counts_ok},
                {"signal_counts", r.signal_counts}, {"order", r.order}};
  row.cells = config_cells(r.config);
  const double a = r.attention_ms;
  for (double v : {a, r.attention_fused_order_ms, r.loopback_per_cta_ms, r.loopback_per_slice_ms,
                   r.loopback_by_agent_ms, r.loopback_head_major_ms, r.attention_fused_order_ms / a,
                   r.loopback_per_cta_ms / a, r.loopback_per_slice_ms / a, r.loopback_by_agent_ms / a,
                   r.loopback_head_major_ms / a})
    row.cells.push_back(v);
  row.cells.push_back(fmt::format("{}, {} ({})", r.fused_order_equal ? "yes" : "NO",
                                  r.signal_counts_ok ? "ok" : "WRONG", r.signal_counts));
  return row;
}

// The sweep of a one-GPU mode that times rank o.rank's share (--kernel-only, --link host).
std::vector<BenchConfig> one_rank_configs(const SweepOptions& o, const char* mode) {
  check_ranks(o.ranks);
  for (int P : o.ranks)
    XS_ASSERT(o.rank < P, "bench ulysses {}: --rank {} is not a rank of P = {}", mode, o.rank, P);
  return configs_of(o, o.ranks);
}

bench::Table host_link_table() {
  bench::Table t(kConfigColumns);
  bool first = true;
  for (const char* h : {"attn-g", "attn-rm", "sm-g", "sm-rm", "ce-drain", "ce-owner", "after"}) {
    t.add({h, 8, ".3f", false, first});
    first = false;
  }
  t.add({"stall-rm", 9, ".1f", false, true});
  t.add({"stall-g", 8, ".1f"});
  t.add({"pred-x", 7, ".3f", false, true});
  t.add({"meas-x", 7, ".3f"});
  t.add({"vs-after", 8, ".3f"});
  t.add({"GB/s", 6, ".1f"});
  return t.add({"schedule[/chunk], run, bitwise", 0, "", false, true});
}

bench::Row host_link_row(const HostLinkRow& r) {
  bench::Row row;
  row.check = {r.bitwise_equal, "host-link outputs differ from the all-HBM ones"};
  row.config = config_json(r.config);
  row.values = {{"rank", r.rank}, {"attention_guided_ms", r.attention_guided_ms},
                {"attention_row_major_ms", r.attention_row_major_ms}, {"attention_owner_ms", r.attention_owner_ms},
                {"fused_guided_ms", r.fused_guided_ms},
                {"schedule", r.schedule}, {"fused_sm_guided_ms", r.fused_sm_guided_ms},
                {"fused_ce_drain_ms", r.fused_ce_drain_ms}, {"predicted_sm_stores_ms", r.predicted_sm_stores_ms},
                {"predicted_ce_drain_ms", r.predicted_ce_drain_ms}, {"fused_ce_owner_ms", r.fused_ce_owner_ms},
                {"predicted_ce_owner_ms", r.predicted_ce_owner_ms}, {"drain_chunk_blocks", r.drain_chunk_blocks},
                {"copy_op_us", r.copy_op_us}, {"copy_GBps", r.copy_GBps},
                {"hiding_bound_vs_row_major", r.hiding_bound_vs_row_major}, {"sms", r.sms},
                {"achievable_ms", r.achievable_ms}, {"achievable_bound_vs_row_major", r.achievable_bound_vs_row_major},
                {"fused_row_major_ms", r.fused_row_major_ms}, {"exchange_after_ms", r.exchange_after_ms},
                {"predicted_stall_guided_us", r.predicted_stall_guided_us},
                {"predicted_stall_row_major_us", r.predicted_stall_row_major_us},
                {"speedup_vs_row_major", r.speedup_vs_row_major},
                {"predicted_speedup_vs_row_major", r.predicted_speedup_vs_row_major},
                {"speedup_vs_exchange_after", r.speedup_vs_exchange_after}, {"stall_predicted", r.stall_predicted},
                {"link_GBps", r.link_GBps}, {"guided_slice_run", r.guided_run},
                {"bitwise_equal", r.bitwise_equal}, {"order", r.order}};
  row.cells = config_cells(r.config);
  for (double v : {r.attention_guided_ms, r.attention_row_major_ms, r.fused_sm_guided_ms, r.fused_row_major_ms,
                   r.fused_ce_drain_ms, r.fused_ce_owner_ms, r.exchange_after_ms, r.predicted_stall_row_major_us,
                   r.predicted_stall_guided_us,
                   r.predicted_speedup_vs_row_major, r.speedup_vs_row_major, r.speedup_vs_exchange_after, r.link_GBps})
    row.cells.push_back(v);
  row.cells.push_back(fmt::format("{}, {}, {}", r.schedule == "copy_engine_drain"
                                                    ? fmt::format("ce/{}", r.drain_chunk_blocks)
                                                    : std::string("sm"),
                                  r.guided_run, r.bitwise_equal ? "yes" : "NO"));
  return row;
}

}  // namespace

void run_host_link_sweep(const SweepOptions& o) {
  const auto params = burstgap::read_params_or_default(o.params);
  const burstgap::ModelParams& host = params.find("host", "st16");
  const auto configs = one_rank_configs(o, "--link host");
  const std::string card = card_name();
  std::printf("host link: rank %d's share on one GPU (%s); the other owners' outputs in mapped pinned host memory; "
              "x = speedup of the advisor's schedule (SM stores in its tile order, or the copy-engine drain) over SM "
              "stores in row-major (head_major) order, predicted and measured\n",
              o.rank, card.c_str());
  nlohmann::json head = bench::run_head(card, 1, o.command);
  head["timed"] = "one GPU: rank's share [1, S, H/P, D], stores to the P - 1 other owners over the host link; medians "
                  "of CUDA-event timed launches, the variants in turns";
  head["params"] = nlohmann::json::parse(burstgap::params_to_json({.groups = {host}}));
  bench::Report report(host_link_table(), bench::ResultsFile(o.json, head), configs.size(),
                       "bench ulysses --link host");
  report.print_header();
  std::vector<HostLinkRow> rows;
  for (const auto& b : configs) {
    rows.push_back(run_host_link_bench(b, o.rank, host, o.warmup, std::max(o.samples, 3)));
    const HostLinkSummary sum = summarize_host_link(rows);
    report.set("summary", {{"geomean_where_stall_predicted", sum.geomean_where_stall_predicted},
                           {"rows_where_stall_predicted", sum.rows_where_stall_predicted},
                           {"speedup_prediction_median_abs_rel_error", sum.speedup_prediction_median_abs_rel_error},
                           {"min_speedup", sum.min_speedup},
                           {"max_speedup", sum.max_speedup},
                           {"hiding_bound_geomean_where_stall_predicted", sum.hiding_bound_geomean},
                           {"achievable_bound_geomean_where_stall_predicted", sum.achievable_bound_geomean},
                           {"speedup_over_achievable_bound_geomean", sum.speedup_over_achievable_geomean},
                           {"chunked_over_owner_drain_geomean", sum.chunked_over_owner_drain_geomean}});
    report.add(host_link_row(rows.back()));
  }
  const HostLinkSummary sum = summarize_host_link(rows);
  std::printf("advisor's schedule over row-major: geomean %.3f over the %d rows with a predicted stall (min %.3f, max "
              "%.3f; every remote byte hidden: %.3f; achievable at the kernel's tile granularity: %.3f, reached "
              "%.3f of it); predicted speedup's median error %.1f%%; the advisor's drain chunks over one per owner: "
              "%.3f\n",
              sum.geomean_where_stall_predicted, sum.rows_where_stall_predicted, sum.min_speedup, sum.max_speedup,
              sum.hiding_bound_geomean, sum.achievable_bound_geomean, sum.speedup_over_achievable_geomean,
              100 * sum.speedup_prediction_median_abs_rel_error, sum.chunked_over_owner_drain_geomean);
  report.finish();
}

void run_sweep(const SweepOptions& o) {
  const auto params = burstgap::read_params_or_default(o.params);
  const int gpus = comm::visible_gpus();
  check_ranks(o.ranks);
  std::vector<int> ranks;
  for (int P : o.ranks) {
    if (P <= gpus) ranks.push_back(P);
    else std::printf("note: skipping P = %d: only %d GPU(s) visible\n", P, gpus);
  }
  XS_ASSERT(!ranks.empty(), "bench ulysses: no requested P fits the {} visible GPU(s)", gpus);
  const auto configs = configs_of(o, ranks);
  const std::string card = card_name();
  nlohmann::json head = bench::run_head(card, gpus, o.command);
  head["timed"] = "post-attention part (attention + output exchange); pre_a2a_ms separately; medians of the slowest "
                  "rank; torch_serial_ms = best SDPA backend (flash, cudnn) on the gathered [1, S, H/P, D] + this "
                  "row's measured exchange (serial - attention)";
  bench::Report report(sweep_table(), bench::ResultsFile(o.json, head), configs.size(), "bench ulysses");
  report.print_header();
  Curves curves;
  double max_speedup = 0;
  bool fused_equal = true;
  for (const auto& b : configs) {
    const BenchRow r = run_bench(b, params.for_exchange(b.ranks), {o.warmup, o.samples});
    const bench::Row row = sweep_row(r, sdpa_best_ms(b.problem(), o.torch));
    fused_equal = fused_equal && r.fused_equal;
    if (row.check.ok) {
      max_speedup = std::max(max_speedup, r.speedup_vs_serial);
      auto& curve = curves[fmt::format("P={} H={} D={}", b.ranks, b.heads, b.head_dim)];
      curve.first.push_back(double(b.seq));
      curve.second.push_back(r.speedup_vs_serial);
    }
    report.set("max_speedup_vs_serial", max_speedup);
    report.set("all_fused_bitwise_equal", fused_equal);
    report.add(row);
  }
  std::printf("maximum sender-visible speedup over serial %.3fx over %zu configurations%s\n", max_speedup,
              configs.size(), fused_equal ? "; fused == serial bitwise in every row" : "; SOME FUSED OUTPUTS DIFFER");
  report.finish();
  if (!o.png.empty() && !curves.empty()) write_png(curves, card, gpus, o.png);
}

void run_kernel_sweep(const SweepOptions& o) {
  const auto params = burstgap::read_params_or_default(o.params);
  const auto configs = one_rank_configs(o, "--kernel-only");
  const std::string card = card_name();
  std::printf("kernel only: rank %d's share on one GPU (%s), no NCCL; loopback = the fused kernel with every target "
              "local; ratios to attention alone\n", o.rank, card.c_str());
  nlohmann::json head = bench::run_head(card, 1, o.command);
  head["timed"] = "one GPU, no NCCL: rank's share [1, S, H/P, D]; medians of CUDA-event timed launches (bench/timing.hpp)";
  bench::Report report(kernel_table(), bench::ResultsFile(o.json, head), configs.size(),
                       "bench ulysses --kernel-only");
  report.print_header();
  bool order_equal = true, counts_ok = true;
  for (const auto& b : configs) {
    const KernelRow r = run_kernel_bench(b, o.rank, params.for_exchange(b.ranks), o.warmup, std::max(o.samples, 3));
    order_equal = order_equal && r.fused_order_equal;
    counts_ok = counts_ok && r.signal_counts_ok;
    report.add(kernel_row(r));
  }
  std::printf("attention in the fused order %s attention in head_major order bitwise in every row\n",
              order_equal ? "==" : "!= (SOME ROWS DIFFER)");
  std::printf("signal counts %s fused_signals_per_forward at every owner in every row\n",
              counts_ok ? "==" : "!= (SOME ROWS DIFFER: the receivers would wait for the wrong count)");
  report.finish();
  XS_ASSERT(order_equal, "bench ulysses --kernel-only: the fused order changed attention's output");
  XS_ASSERT(counts_ok, "bench ulysses --kernel-only: a signal mode's counts differ from fused_signals_per_forward");
}

}  // namespace xstage::ulysses
