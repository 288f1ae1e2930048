// `xstage bench moe`: the sweep (host) and one configuration's run (CUDA,
// xstage/moe/moe_bench.cpp); figures in docs/xstage-moe.md.
#pragma once

#include <string>
#include <vector>

#include "xstage/burstgap.hpp"
#include "xstage/moe.hpp"

namespace xstage::moe {

struct BenchConfig {
  int tokens_per_rank = 128, experts = 64, topk = 2, hidden = 4096, intermediate = 2048, ep = 2;
  std::string routing = "uniform";  // uniform | skewed (Zipf 1.2, seeded)
  Problem problem() const { return {ep, tokens_per_rank, experts, topk, hidden, intermediate}; }
  SyntheticRouting synthetic() const;
};

// "standard": tokens {128, 512, 2048, 8192} x (E, k) {(64,2), (128,6), (256,6), (256,8)}
// x (hidden, I) {(3072, 8192), (4096, 2048), (7168, 3072)} x EP {2, 4} x routing
// {uniform, skewed} = 192 configurations. "eight" and "one": the same 96 at EP 8
// and at EP 1 (one GPU: no NVLink, the kernel's compute and its schedules alone).
// "quick": 8 small ones for a smoke run.
std::vector<BenchConfig> bench_sweep(const std::string& name);

struct BenchRow {
  BenchConfig config;
  double expert_wave_us = 0, interleaved_us = 0, unfused_us = 0, grouped_gemm_us = 0;
  double speedup = 0;        // expert_wave / interleaved
  double tflops = 0;         // per GPU, best fused schedule
  double gemm_tflops = 0;    // per GPU, the unfused path's cuBLAS GEMMs alone
  double nvlink_GBps = 0;    // remote bytes per GPU / best fused time
  double max_rel_err = 0;    // fused vs unfused outputs, relative to the output's max
  bool correct = false;
  ScheduleConfig interleaved;  // the advisor's choice
  int compare_raster = 0;                   // raster group of the comparison order (0: none)
  double interleaved_compare_raster_us = 0; // the advisor's interleaved schedule over tiles in that group
  // With compare_dispatch: the interleaved schedule with all of the dispatch before the
  // tiles, a warp per row (FusedMoe::DispatchMode::before_tiles) and the whole CTA per
  // row (by_block, the kernel's dispatch until session 8); the other columns overlap it.
  bool compare_dispatch = false;
  double interleaved_before_tiles_us = 0, interleaved_by_block_us = 0;
  // With compare_release: the interleaved schedule with each tile released by its
  // consumer warpgroup (FusedMoe::ReleaseMode::by_consumer, the kernel until session 9);
  // the other columns release by the agent.
  bool compare_release = false;
  double interleaved_release_by_consumer_us = 0;
  // With profile: where the Interleaved kernel's time goes (rank 0; profiled launches
  // after the timed ones, FusedMoe::set_profile).
  bool profiled = false;
  KernelProfile profile;
  // With device_routing: the forward from router logits (FusedMoe::route_on_device, then
  // the kernel; logits that make the top-k choose the configuration's experts), its
  // planner part (top-k, P > 1: the experts' all-gather, layout and order on the GPU),
  // and whether its output equals the host-routed forward of the same routing bitwise.
  bool device_routing = false;
  double from_logits_us = 0, planner_us = 0;
  bool from_logits_bitwise = false;
  // Mean per call over `per` profiled calls (after the timing, slowest rank per phase):
  // top-k, all-gather, count, scan, order, assign.
  double planner_phase_us[6] = {0, 0, 0, 0, 0, 0};
  ScheduleConfig from_logits_config;  // chosen for the mean count per expert (expected_tiles)
  std::string unfused_gemm;    // how the unfused path ran its GEMMs (UnfusedMoe::gemm_path, rank 0)
};

// What run_bench times besides the two schedules and the unfused path.
struct BenchOptions {
  int warmup = 2, iters = 10;
  int compare_raster = 0;         // > 0: the interleaved schedule over tiles in that raster group (1: m-major)
  bool device_routing = false;    // the forward from router logits (see BenchRow)
  bool compare_dispatch = false;  // the interleaved order with the dispatch not overlapped (two modes)
  bool compare_release = false;   // the interleaved order with the consumers' own releases
  bool profile = false;           // the interleaved kernel's phases (profiled launches after the timing)
  int blocks = 0;                 // > 0: the fused kernel's persistent CTAs (FusedMoe::set_blocks)
};

// Runs one configuration on ep GPUs (threads); times both schedules and the
// unfused path, checks the fused outputs against the unfused ones. Both schedules
// order tiles in raster group kMoeRasterGroup; the comparisons of `o` are timed in
// the same turns.
BenchRow run_bench(const BenchConfig& c, const burstgap::ModelParams& params, const BenchOptions& o);

}  // namespace xstage::moe
