// `xstage bench ulysses`: Ulysses SP attention, fused post-attention All-to-All
// against the serial, coarse-overlap and PyTorch-like serial paths, over the
// issue's sweep (only the P that the visible GPUs allow); one table row per
// configuration, JSON and a PNG of the speedup over serial vs S.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "common/check.hpp"
#include "common/files.hpp"
#include "common/plot.hpp"
#include "common/progress.hpp"
#include "xstage/burstgap.hpp"
#include "xstage/ulysses.hpp"

#ifdef XSTAGE_HAVE_CUDA
#include <cuda_runtime.h>

#include "xstage/attention_cuda.hpp"
#include "xstage/comm.hpp"
#include "xstage/device_buffer.hpp"
#include "xstage/ulysses_bench.hpp"
#ifdef XSTAGE_HAVE_TORCH_BASELINES
#include "sdpa_baseline.hpp"
#endif
#endif

namespace xstage::cli {

namespace {

struct UlyssesCli {
  std::vector<int> ranks{2, 4};
  int64_t min_seq = 4096, max_seq = 131072;
  std::string params;  // default: <source>/xstage/data/h200_params.json
  std::string json = "docs/results/ulysses.json";
  std::string png = "docs/results/ulysses_speedup.png";
  std::string torch = "auto";  // auto | off
  int warmup = 2, samples = 5;
  bool kernel_only = false;  // one GPU, no NCCL: the fused kernel's own cost (loopback) against attention alone
  int rank = 0;              // --kernel-only: whose share and order
};

#ifdef XSTAGE_HAVE_CUDA
// PyTorch-like serial: the best SDPA backend on the rank's gathered [1, S, H/P, D]
// problem (device 0), plus this run's measured exchange back (serial - attention).
double sdpa_best_ms(const ulysses::Problem& p, const std::string& mode) {
#ifdef XSTAGE_HAVE_TORCH_BASELINES
  if (mode == "off") return -1;
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
  (void)mode;
  return -1;
#endif
}

void check_ranks(const std::vector<int>& ranks) {
  for (int P : ranks)
    XS_ASSERT(P >= 2 && P <= ulysses::kMaxRanks, "bench ulysses: --ranks {} is outside 2 .. {}", P, ulysses::kMaxRanks);
}

// --kernel-only: rank c.rank's share of every configuration on GPU 0, no peers.
void run_kernel_only(const UlyssesCli& c, const std::string& json_path) {
  const auto params = burstgap::read_params_or_default(c.params);
  check_ranks(c.ranks);
  const auto configs = ulysses::bench_sweep(c.ranks, c.min_seq, c.max_seq);
  XS_ASSERT(!configs.empty(), "bench ulysses: no configuration with S in [{}, {}]", c.min_seq, c.max_seq);
  for (int P : c.ranks)
    XS_ASSERT(c.rank < P, "bench ulysses --kernel-only: --rank {} is not a rank of P = {}", c.rank, P);
  cudaDeviceProp prop{};
  XS_CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("kernel only: rank %d's share on one GPU (%s), no NCCL; loopback = the fused kernel with every target "
              "local; ratios to attention alone\n", c.rank, prop.name);
  std::printf("%6s %2s %3s %4s | %8s %8s %8s %8s %8s %8s | %7s %7s %7s %7s %7s | %s\n", "S", "P", "H", "D", "attn",
              "attn-ord", "loop-cta", "loop-sl", "loop-ag", "loop-hm", "ord", "cta", "slice", "agent", "hm",
              "order bitwise, signal counts");
  nlohmann::json rows = nlohmann::json::array();
  bool all_equal = true, counts_ok = true;
  common::ProgressBar progress("bench ulysses --kernel-only", configs.size());
  for (const auto& b : configs) {
    const auto r = ulysses::run_kernel_bench(b, c.rank, params.for_exchange(b.ranks), c.warmup, std::max(c.samples, 3));
    progress.tick();
    const double a = r.attention_ms;
    std::printf("%6ld %2d %3ld %4ld | %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f | %7.3f %7.3f %7.3f %7.3f %7.3f | %s, %s (%s)\n",
                long(b.seq), b.ranks, long(b.heads), long(b.head_dim), a, r.attention_fused_order_ms,
                r.loopback_per_cta_ms, r.loopback_per_slice_ms, r.loopback_by_agent_ms, r.loopback_head_major_ms,
                r.attention_fused_order_ms / a, r.loopback_per_cta_ms / a, r.loopback_per_slice_ms / a,
                r.loopback_by_agent_ms / a, r.loopback_head_major_ms / a, r.fused_order_equal ? "yes" : "NO", r.signal_counts_ok ? "ok" : "WRONG",
                r.signal_counts.c_str());
    std::fflush(stdout);
    all_equal = all_equal && r.fused_order_equal;
    counts_ok = counts_ok && r.signal_counts_ok;
    rows.push_back({{"S", b.seq},
                    {"P", b.ranks},
                    {"H", b.heads},
                    {"D", b.head_dim},
                    {"rank", r.rank},
                    {"attention_ms", r.attention_ms},
                    {"attention_fused_order_ms", r.attention_fused_order_ms},
                    {"loopback_per_cta_ms", r.loopback_per_cta_ms},
                    {"loopback_per_slice_ms", r.loopback_per_slice_ms},
                    {"loopback_by_agent_ms", r.loopback_by_agent_ms},
                    {"loopback_head_major_ms", r.loopback_head_major_ms},
                    {"fused_order_bitwise_equal", r.fused_order_equal},
                    {"signal_counts_ok", r.signal_counts_ok},
                    {"signal_counts", r.signal_counts},
                    {"order", r.order}});
    if (!json_path.empty()) {
      const nlohmann::json out = {{"card", prop.name},
                                  {"gpus", 1},
                                  {"date", today_utc()},
                                  {"command", command_line()},
                                  {"timed", "one GPU, no NCCL: rank's share [1, S, H/P, D]; medians of CUDA-event "
                                            "timed launches (bench_timing.hpp)"},
                                  {"complete", rows.size() == configs.size()},
                                  {"rows", rows}};
      common::write_file_atomic(json_path, out.dump(2) + "\n");
    }
  }
  std::printf("attention in the fused order %s attention in head_major order bitwise in every row\n",
              all_equal ? "==" : "!= (SOME ROWS DIFFER)");
  if (!json_path.empty()) std::printf("wrote %s\n", json_path.c_str());
  std::printf("signal counts %s fused_signals_per_forward at every owner in every row\n",
              counts_ok ? "==" : "!= (SOME ROWS DIFFER: the receivers would wait for the wrong count)");
  XS_ASSERT(all_equal, "bench ulysses --kernel-only: the fused order changed attention's output");
  XS_ASSERT(counts_ok, "bench ulysses --kernel-only: a signal mode's counts differ from fused_signals_per_forward");
}

void run(const UlyssesCli& c) {
  const auto params = burstgap::read_params_or_default(c.params);
  const int gpus = comm::visible_gpus();
  std::vector<int> ranks;
  check_ranks(c.ranks);
  for (int P : c.ranks) {
    if (P <= gpus) ranks.push_back(P);
    else std::printf("note: skipping P = %d: only %d GPU(s) visible\n", P, gpus);
  }
  XS_ASSERT(!ranks.empty(), "bench ulysses: no requested P fits the {} visible GPU(s)", gpus);
  const auto configs = ulysses::bench_sweep(ranks, c.min_seq, c.max_seq);
  XS_ASSERT(!configs.empty(), "bench ulysses: no configuration with S in [{}, {}]", c.min_seq, c.max_seq);
  cudaDeviceProp prop{};
  XS_CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));

  std::printf("%6s %2s %3s %4s | %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s | %6s | %8s %8s | %7s | %s\n", "S", "P",
              "H", "D", "attn", "serial", "torch", "coarse", "fusedS", "fusedR", "cta-sig", "slice-sig", "agent-sig",
              "loopback", "attn-ord", "speedup", "pred us", "meas us", "GB/s", "bitwise");
  nlohmann::json rows = nlohmann::json::array();
  std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> curves;
  double max_speedup = 0;
  bool all_equal = true;
  auto write_json = [&](bool complete) {
    if (c.json.empty()) return;
    const nlohmann::json out = {
        {"card", prop.name},
        {"gpus", gpus},
        {"date", today_utc()},
        {"command", command_line()},
        {"timed", "post-attention part (attention + output exchange); pre_a2a_ms separately; medians "
                  "of the slowest rank; torch_serial_ms = best SDPA backend (flash, cudnn) on the "
                  "gathered [1, S, H/P, D] + this row's measured exchange (serial - attention)"},
        {"complete", complete},
        {"max_speedup_vs_serial", max_speedup},
        {"all_fused_bitwise_equal", all_equal},
        {"rows", rows}};
    common::write_file_atomic(c.json, out.dump(2) + "\n");
  };
  common::ProgressBar progress("bench ulysses", configs.size());
  for (const auto& b : configs) {
    const ulysses::Problem p = b.problem();
    const auto r = ulysses::run_bench(b, params.for_exchange(b.ranks), {c.warmup, c.samples});
    const double sdpa = sdpa_best_ms(p, c.torch);
    const double torch_ms = sdpa > 0 ? sdpa + (r.serial_ms - r.attention_ms) : NAN;
    progress.tick();
    std::printf("%6ld %2d %3ld %4ld | %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f | %6.3f | %8.1f "
                "%8.1f | %7.1f | %s\n",
                long(b.seq), b.ranks, long(b.heads), long(b.head_dim), r.attention_ms, r.serial_ms, torch_ms,
                r.coarse_ms, r.fused_sender_ms, r.fused_receiver_ms, r.fused_per_cta_ms, r.fused_per_slice_ms,
                r.fused_by_agent_ms, r.fused_loopback_ms,
                r.attention_fused_order_ms, r.speedup_vs_serial,
                r.predicted_stall_us,
                r.measured_stall_us, r.nvlink_GBps,
                r.fused_equal ? (r.coarse_equal ? "yes" : "fused yes, coarse NO") : "NO");
    std::fflush(stdout);
    all_equal = all_equal && r.fused_equal;
    max_speedup = std::max(max_speedup, r.speedup_vs_serial);
    auto& curve = curves[fmt::format("P={} H={} D={}", b.ranks, b.heads, b.head_dim)];
    curve.first.push_back(double(b.seq));
    curve.second.push_back(r.speedup_vs_serial);
    nlohmann::json j = {{"S", b.seq},
                        {"P", b.ranks},
                        {"H", b.heads},
                        {"D", b.head_dim},
                        {"pre_a2a_ms", r.pre_a2a_ms},
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
    rows.push_back(j);
    // Rewritten after every row (complete: false until the last), so a run cut short
    // by a time limit keeps what it measured.
    write_json(rows.size() == configs.size());
  }
  std::printf("maximum sender-visible speedup over serial %.3fx over %zu configurations%s\n", max_speedup,
              configs.size(), all_equal ? "; fused == serial bitwise in every row" : "; SOME FUSED OUTPUTS DIFFER");
  if (!c.json.empty()) std::printf("wrote %s\n", c.json.c_str());
  if (!c.png.empty()) {
    common::plot::Chart chart;
    chart.title = fmt::format("Ulysses fused / serial ({}, {} GPUs)", prop.name, gpus);
    chart.x.label = "S (tokens)";
    chart.x.scale = common::plot::Scale::log10;
    chart.y.label = "speedup over serial (sender-visible)";
    double x0 = INFINITY, x1 = 0;
    for (const auto& [label, xy] : curves) {
      chart.series.push_back({.label = label, .x = xy.first, .y = xy.second});
      x0 = std::min(x0, xy.first.front());
      x1 = std::max(x1, xy.first.back());
    }
    chart.series.push_back(common::plot::horizontal_line("1x", 1.0, x0, x1));
    common::plot::write_chart(chart, c.png);
    std::printf("wrote %s\n", c.png.c_str());
  }
}
#endif

}  // namespace

void add_ulysses_commands(CLI::App& app) {
  auto* bench = bench_group(app);
  auto* cmd = bench->add_subcommand("ulysses", "Ulysses SP attention: fused post-attention All-to-All vs serial, "
                                               "coarse overlap and PyTorch-like serial");
  auto c = std::make_shared<UlyssesCli>();
  cmd->add_option("--ranks", c->ranks, "P values, comma-separated (those above the visible GPUs are skipped with a note)")->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--min-seq", c->min_seq, "Smallest S of the sweep (4096 .. 131072, powers of two)")
      ->capture_default_str();
  cmd->add_option("--max-seq", c->max_seq, "Largest S of the sweep")->capture_default_str();
  cmd->add_option("--params", c->params, "Burst-Gap parameters (default: xstage/data/h200_params.json)");
  cmd->add_option("--warmup", c->warmup, "Warm-up launches per path")->capture_default_str();
  cmd->add_option("--samples", c->samples, "Timed samples per path (median)")->capture_default_str();
  cmd->add_option("--torch", c->torch, "auto: LibTorch SDPA baseline when built in; off")
      ->check(CLI::IsMember({"auto", "off"}))
      ->capture_default_str();
  cmd->add_option("--json", c->json, "Results file (empty: none)")->capture_default_str();
  cmd->add_option("--png", c->png, "Speedup plot (empty: none)")->capture_default_str();
  cmd->add_flag("--kernel-only", c->kernel_only,
                "One GPU, no NCCL: attention alone, in the fused order, and the fused kernel with all targets local "
                "(its own cost), for one rank's share; JSON to --json (default: none)");
  cmd->add_option("--rank", c->rank, "--kernel-only: the rank whose share and order are timed")
      ->check(CLI::Range(0, 7))
      ->capture_default_str();
  auto* json_opt = cmd->get_option("--json");
  cmd->callback([c, json_opt] {
    check_outputs("bench ulysses", c->json, c->png);
#ifdef XSTAGE_HAVE_CUDA
    if (c->kernel_only) {
      run_kernel_only(*c, json_opt->count() > 0 ? c->json : std::string());
      return;
    }
    run(*c);
#else
    XS_FAIL("this xstage was built without CUDA (nvcc and NCCL >= 2.28 were not found): bench ulysses is unavailable");
#endif
  });
}

}  // namespace xstage::cli
