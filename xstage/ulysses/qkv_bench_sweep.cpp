// The sweep of `xstage bench qkv`: every (P, H, S) of the lists through run_qkv_bench,
// one table line each, the results file rewritten after every row; fails at the end
// when a row's output or signal counts were wrong.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "common/check.hpp"
#include "common/cuda_check.hpp"
#include "xstage/bench/qkv_bench.hpp"
#include "xstage/bench/report.hpp"
#include "xstage/ulysses/qkv.hpp"

namespace xstage::ulysses {

namespace {

bench::Table qkv_table(const std::vector<int>& groups, bool host_link) {
  bench::Table t({{"S", 6}, {"P", 2}, {"H", 3}, {"cublas+nr", 10, ".4f", false, true}, {"fused", 10, ".4f"},
                  {"g", 3}, {"ratio", 7, ".3f"}, {"TFLOP/s", 7, ".1f"}, {"max|diff|", 10, ".4g", false, true},
                  {"elems off", 9}, {"counts", 6}, {"unsplit", 9, ".4f", false, true}, {"consumer", 9, ".4f"}});
  for (std::size_t i = 1; i < groups.size(); ++i) t.add({fmt::format("g{}", groups[i]), 9, ".4f"});
  if (host_link) {
    t.add({"own-hbm", 9, ".4f", false, true});
    t.add({"host", 9, ".4f"});
    t.add({"pred", 9, ".4f"});
    t.add({"bitwise", 7});
  }
  return t;
}

bench::Row qkv_row(const QkvBenchRow& r) {
  bench::Row row;
  const bool host_ok = !r.host_link || r.host_bitwise_equal;
  row.check = {r.counts_ok() && r.elements_off == 0 && host_ok,
               !r.counts_ok() ? "miscounted: " + r.count_errors
               : !host_ok     ? std::string("host-link outputs differ from the HBM ones")
                              : fmt::format("{} elements beyond one bf16 step of the cuBLAS path", r.elements_off)};
  row.config = {{"S", r.seq}, {"P", r.ranks}, {"H", r.heads}, {"D", kQkvHeadDim}};
  nlohmann::json by_group = nlohmann::json::object();
  for (const auto& [group, ms] : r.fused_by_group) by_group[std::to_string(group)] = ms;
  row.values = {{"rank", r.rank},
                {"cublas_norm_rope_ms", r.cublas_norm_rope_ms},
                {"fused_loopback_ms", r.fused_loopback_ms},
                {"fused_tflops", r.tflops_fused},
                {"max_abs_diff_vs_cublas_path", r.max_abs_diff},
                {"elements_beyond_one_bf16_step", r.elements_off},
                {"signal_counts_ok", r.counts_ok()},
                {"signal_count_errors", r.count_errors},
                {"raster_group", r.group},
                {"fused_ms_by_raster_group", by_group},
                {"split_tail", r.split_tail},
                {"fused_unsplit_ms", r.split_tail ? nlohmann::json(r.fused_unsplit_ms) : nlohmann::json()},
                {"fused_released_by_consumers_ms", r.fused_by_consumer_ms},
                {"order", r.order}};
  row.cells = {(long long)r.seq, r.ranks, r.heads, r.cublas_norm_rope_ms, r.fused_loopback_ms, r.group,
               r.fused_loopback_ms / r.cublas_norm_rope_ms, r.tflops_fused, r.max_abs_diff,
               (long long)r.elements_off, std::string(r.counts_ok() ? "ok" : "WRONG"),
               r.split_tail ? bench::Cell(r.fused_unsplit_ms) : bench::Cell(), r.fused_by_consumer_ms};
  for (std::size_t i = 1; i < r.fused_by_group.size(); ++i) row.cells.push_back(r.fused_by_group[i].second);
  if (r.host_link) {
    row.values.update({{"owners_hbm_ms", r.owners_hbm_ms},
                       {"fused_host_ms", r.fused_host_ms},
                       {"predicted_host_ms", r.predicted_host_ms},
                       {"remote_bytes", r.remote_bytes},
                       {"host_bitwise_equal", r.host_bitwise_equal}});
    row.cells.push_back(r.owners_hbm_ms);
    row.cells.push_back(r.fused_host_ms);
    row.cells.push_back(r.predicted_host_ms);
    row.cells.push_back(std::string(r.host_bitwise_equal ? "yes" : "NO"));
  }
  return row;
}

}  // namespace

void run_qkv_sweep(const QkvSweepOptions& o) {
  const auto params = burstgap::read_params_or_default(o.params);
  XS_ASSERT(o.warmup >= 0 && o.samples >= 1, "bench qkv: --warmup must be >= 0 and --samples >= 1");
  XS_ASSERT(!o.groups.empty() && std::all_of(o.groups.begin(), o.groups.end(), [](int g) { return g >= 0; }),
            "bench qkv: --groups needs raster groups >= 0 (0: the L2 rule)");
  struct Config {
    int64_t S;
    int P, H;
  };
  std::vector<Config> configs;
  for (int P : o.ranks)
    for (int H : o.heads)
      for (int64_t S : o.seqs) configs.push_back({S, P, H});
  cudaDeviceProp prop{};
  XS_CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("bench qkv: rank %d's QKV projection on one GPU (%s), no peers; fused = GEMM + norms + RoPE + stores "
              "to the owners (here all local) in one kernel\n",
              o.rank, prop.name);
  nlohmann::json head = bench::run_head(prop.name, 1, o.command);
  head["timed"] = "one GPU, no peers: rank's rows [S/P, C] -> q, k, v; medians of CUDA-event timed launches taken "
                  "in turns (bench/timing.hpp)";
  const bool host_link = o.link == "host";
  XS_ASSERT(host_link || o.link == "nvlink", "bench qkv: --link must be nvlink or host (got '{}')", o.link);
  const burstgap::ModelParams* host = host_link ? &params.find("host", "st16") : nullptr;
  if (host)
    std::printf("host link: the other owners' q, k, v in mapped pinned host memory; pred = own-hbm + remote bytes "
                "at %.1f GB/s (the host fit's drain)\n",
                host->drain_GBps);
  bench::Report report(qkv_table(o.groups, host_link), bench::ResultsFile(o.json, head), configs.size(),
                       "bench qkv");
  report.print_header();
  for (const auto& cf : configs)
    report.add(qkv_row(run_qkv_bench(cf.S, cf.P, cf.H, o.rank, params.for_exchange(cf.P), o.warmup, o.samples,
                                     o.groups, o.count_checks, host)));
  report.finish();
  XS_ASSERT(report.all_correct(),
            "bench qkv: the fused kernel disagreed with the cuBLAS path, miscounted its signals or changed over the "
            "host link (see the table)");
}

}  // namespace xstage::ulysses
