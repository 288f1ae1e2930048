// `xstage bench moe`: the sweep and its filters (host, xstage/moe/bench_sweep.cpp),
// one configuration's run and the whole sweep (CUDA, xstage/moe/moe_bench*.cpp);
// figures in docs/xstage-moe.md.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "common/plot.hpp"
#include "common/stats.hpp"
#include "xstage/burstgap/burstgap.hpp"
#include "xstage/moe/moe.hpp"

namespace xstage::moe {

struct BenchConfig {
  int tokens_per_rank = 128, experts = 64, topk = 2, hidden = 4096, intermediate = 2048, ep = 2;
  std::string routing = "uniform";  // uniform | skewed (Zipf 1.2, seeded) | balanced (every expert the mean count)
  Problem problem() const { return {ep, tokens_per_rank, experts, topk, hidden, intermediate}; }
  SyntheticRouting synthetic() const;
};

// "standard": tokens {128, 512, 2048, 8192} x (E, k) {(64,2), (128,6), (256,6), (256,8)}
// x (hidden, I) {(3072, 8192), (4096, 2048), (7168, 3072)} x EP {2, 4} x routing
// {uniform, skewed} = 192 configurations. "eight" and "one": the same 96 at EP 8
// and at EP 1 (one GPU: no NVLink, the kernel's compute and its schedules alone).
// "quick": 8 small ones for a smoke run. `routings` replaces {uniform, skewed} (the
// counts above are for those two).
std::vector<BenchConfig> bench_sweep(const std::string& name,
                                     const std::vector<std::string>& routings = {"uniform", "skewed"});

// Which rows of a sweep run: one row by index, or those whose EP, tokens and routing
// are listed (an empty list keeps every value). Throws when none is left.
struct SweepFilter {
  int only = -1;  // >= 0: that row of the sweep alone
  std::vector<int> ep, tokens;
  std::vector<std::string> routing;
};
std::vector<BenchConfig> select_rows(const std::string& sweep, const SweepFilter& f);
// A results row's configuration (ep, tokens, experts, k, hidden, I, routing) as one
// string: which rows of two results files measured the same configuration.
std::string config_key(const nlohmann::json& row);

struct BenchRow {
  BenchConfig config;
  double expert_wave_us = 0, interleaved_us = 0, unfused_us = 0, grouped_gemm_us = 0;
  double speedup = 0;        // expert_wave / interleaved
  double predicted_order_speedup = 0;  // the same by the order simulation (rank 0; no link stall)
  double tflops = 0;         // per GPU, best fused schedule
  double gemm_tflops = 0;    // per GPU, the unfused path's GEMMs and SwiGLU (its grouped-GEMM rate)
  // The two expert GEMMs alone in cuBLAS's fastest form here (UnfusedMoe::expert_gemms),
  // the roofline: its time, rate, form, and the best fused schedule's speed over it.
  double cublas_us = 0, cublas_tflops = 0, fused_over_cublas = 0;
  std::string cublas_form;
  // The same GEMMs on the experts' own row counts only (the fastest of the grouped and
  // per-expert forms): the roofline of the layer's own problem, and the fused speed over it.
  double cublas_exact_us = 0, fused_over_cublas_exact = 0;
  double fused_over_unfused = 0;  // unfused path time / best fused time
  double nvlink_GBps = 0;    // remote bytes per GPU / best fused time
  double max_rel_err = 0;    // fused vs unfused outputs, relative to the output's max
  bool correct = false;      // max_rel_err within bf16 tolerance (and, with device_routing, from_logits_bitwise)
  ScheduleConfig interleaved;  // the advisor's choice
  // With device_routing: the forward from router logits (FusedMoe::route_on_device, then
  // the kernel; logits that make the top-k choose the configuration's experts), its
  // planner part (top-k, P > 1: the experts' all-gather, layout and order on the GPU),
  // and whether its output equals the host-routed forward of the same routing bitwise.
  bool device_routing = false;
  double from_logits_us = 0, planner_us = 0;
  bool from_logits_bitwise = false;
  // Mean per call over the profiled planner calls (after the timing, slowest rank per
  // phase): top-k, all-gather, count, scan, order, assign.
  double planner_phase_us[6] = {0, 0, 0, 0, 0, 0};
  ScheduleConfig from_logits_config;  // chosen for the mean count per expert (expected_tiles)
  std::string unfused_gemm;    // how the unfused path ran its GEMMs (UnfusedMoe::gemm_path, rank 0)
  bool profiled = false;       // with BenchOptions::profile: rank 0's Interleaved launches, profiled
  KernelProfile profile;
};

// What run_bench times besides the two schedules and the unfused path.
struct BenchOptions {
  int warmup = 2, iters = 10;
  bool device_routing = false;    // the forward from router logits (see BenchRow)
  int blocks = 0;                 // > 0: the fused kernel's persistent CTAs (FusedMoe::set_blocks)
  bool profile = false;           // the kernel's phase shares (KernelProfile) in profiled launches after the timing
};

// Runs one configuration on ep GPUs (threads); times both schedules and the unfused
// path, checks the fused outputs against the unfused ones. Both schedules order tiles
// in raster group kMoeRasterGroup and are sampled in turns.
BenchRow run_bench(const BenchConfig& c, const burstgap::ModelParams& params, const BenchOptions& o);

// `xstage bench moe --link host` (xstage/moe/moe_host_link.cpp): the P ranks of one
// configuration on one GPU (moe::OneGpuGroup, SMs / P CTAs each, all P kernels at once)
// with its combine rows in mapped pinned host memory (WindowMemory::host), so the L2
// epilogue's stores to the owners cross the host link, or the combine drain's copies do.
// Expert-Wave against the advisor's schedule (on the host-link fit), with the model's
// predictions beside the measured times. The one GPU's X-Stage takes all P kernels'
// stores, so the advisor is asked about P x (SMs / P) SMs bursting together.
struct HostLinkRow {
  BenchConfig config;
  double expert_wave_us = 0, interleaved_us = 0;  // medians; slowest rank of each launch (SM stores)
  // Expert-Wave (SM stores) over the advisor's schedule, measured (advised_us) and
  // predicted: Interleaved with SM stores ("sm_stores"), Expert-Wave itself where no
  // schedule is predicted faster ("expert_wave"), or the combine drain ("drain" in
  // Interleaved's order, "drain_expert_wave" in Expert-Wave's).
  double speedup = 0;
  std::string schedule = "sm_stores";
  double advised_us = 0;
  // The same two orders with the combine drain (FusedMoe::set_combine_drain: the copy
  // engine carries the combine rows), medians; 0 where not measured. Their outputs
  // must equal the SM stores' of the same order bitwise (part of `correct`).
  double expert_wave_drain_us = 0, interleaved_drain_us = 0;
  // Expert-Wave with every window in HBM (no link): what any transport of the combine
  // could at best reach (the hiding bound, expert_wave_us over it), and the compute the
  // model's ticket simulation predicts (predicted_compute_us). Interleaved in HBM: the
  // orders' compute apart from the link (predicted_compute_interleaved_us). Each order's
  // outputs must equal its outputs over the link bitwise (part of `correct`); 0 where not
  // measured.
  double expert_wave_hbm_us = 0, interleaved_hbm_us = 0;
  double predicted_stall_expert_wave_us = 0;      // the advisor, for one rank's schedule
  double predicted_stall_interleaved_us = 0;
  double predicted_compute_us = 0;                // Expert-Wave's order on one rank's SMs (order_time_ns)
  double predicted_compute_interleaved_us = 0;    // the Interleaved order's
  // Forward times: each order with SM stores, compute + stall + the combine's reads of
  // every rank's rows back over the link (bytes / D); each order with the drain
  // (predict_drain_us). The speedup is predicted_expert_wave_us over the advised one's.
  double predicted_expert_wave_us = 0, predicted_interleaved_us = 0;
  double predicted_drain_us = 0, predicted_drain_expert_wave_us = 0;  // Interleaved's, Expert-Wave's
  int drain_experts_per_copy = 1;  // the grouping of the faster drain's order, the fastest predicted
  double predicted_speedup = 0;
  burstgap::CopyCosts copy;                       // the copy engine, measured before the rows
  double read_GBps = 0;  // SMs reading mapped host memory (the drain's reads back), measured before the rows
  int sms = 0;                                    // the GPU's SMs (0: not recorded), as predicted
  double max_rel_err = 0;                         // Interleaved against Expert-Wave outputs
  bool correct = false;
  ScheduleConfig interleaved;
  bool profiled = false;  // with BenchOptions::profile: rank 0's account of both orders
  KernelProfile profile_expert_wave, profile_interleaved;

  bool drained() const { return schedule == "drain" || schedule == "drain_expert_wave"; }
  bool drain_in_expert_wave() const { return schedule == "drain_expert_wave"; }
  bool kept_expert_wave() const { return schedule == "expert_wave"; }
  // The advised schedule's one of the four forwards (each order with SM stores and with
  // the drain); as measured (the four timed ones) and as predicted.
  double advised_of(double expert_wave, double interleaved, double drain_expert_wave, double drain) const {
    if (kept_expert_wave()) return expert_wave;
    return !drained() ? interleaved : drain_in_expert_wave() ? drain_expert_wave : drain;
  }
  double measured_advised_us() const {
    return advised_of(expert_wave_us, interleaved_us, expert_wave_drain_us, interleaved_drain_us);
  }
  double predicted_advised_us() const {
    return advised_of(predicted_expert_wave_us, predicted_interleaved_us, predicted_drain_expert_wave_us,
                      predicted_drain_us);
  }
};
HostLinkRow run_host_link_bench(const BenchConfig& c, const burstgap::ModelParams& params, const BenchOptions& o);
// The predicted side of a row, on the host (CPU-tested): stalls, compute, both forward
// times with SM stores and with the drain (the row's `copy` costs), the advisor's
// schedule and the speedup. The schedule: the drain where predicted faster than the
// faster order with SM stores by more than kDrainMargin, in Interleaved's order where
// that drain is predicted faster than Expert-Wave's by more than kDrainOrderMargin, else
// in Expert-Wave's; otherwise Interleaved with SM stores where predicted faster than
// Expert-Wave by more than kSmOrderMargin, else Expert-Wave itself. Where the model
// predicts no gain the baseline stays, so every measured gain is one the model predicted
// (where both orders were predicted equal, Interleaved with SM stores measured
// 0.95-1.20x, geomean 1.02-1.03, in four calls: a gain the model does not see, and losses
// up to 5 %).
// The margin is the model's accepted error (15 %): the forward with SM stores reads
// 0.79-1.08x as measured (median 0.87) on the standard sweep's 96 uniform rows, and where
// the drain was predicted only a little faster it often lost (at 128-512 tokens, by up to
// 27 %); with a 1 % margin the choice was right in 66 of those rows, with 15 % in 90.
inline constexpr double kDrainMargin = 0.15;
// The drain's order: the model's predicted ratio of the two drains (Interleaved's over
// Expert-Wave's) is off by a median 2.0 % (144 uniform rows, P = 2, 4, 8), and the drains
// often lie closer than that. Within it Expert-Wave's order is taken: its experts' rows
// leave first (Interleaved's lag holds each expert's copies back by `lag` waves, measured
// 0.3-1.3 experts' time at P = 8), so it depends least on the tiles' predicted rate.
inline constexpr double kDrainOrderMargin = 0.02;
// The order with SM stores: where the model predicted Interleaved 2-4.2 % faster than
// Expert-Wave (P = 8, 16 SMs a rank, 512 tokens: the order simulation's weak point), it
// measured 0.96-1.03x in three calls, with one row at 0.961-0.970 each time; where it
// predicted 5 % or more (P = 2 and 4) it measured 1.04-1.23x. So Interleaved with SM
// stores is taken only where predicted faster by more than 5 %; within it the baseline
// stays.
inline constexpr double kSmOrderMargin = 0.05;
// A row "loses" where the advisor's schedule is more than this much slower than
// Expert-Wave (speedup below 0.97): the bench's no-loss goal.
inline constexpr double kLossTolerance = 0.03;
void predict_host_link_row(HostLinkRow& row, const burstgap::ModelParams& params, int sms);
// One local expert of one rank in the drain's prediction: when its last L2 tile ends
// (the order's ticket simulation) and its copies (drain_copies).
struct DrainExpertCost {
  double l2_end_us = 0;
  std::vector<DrainCopy> copies;
};
// The combine drain's forward, in us: the experts in the order their L2 tiles end, in
// groups of `experts_per_copy` (FusedMoe::set_combine_drain); a group leaves when its last
// expert's tiles end and the link is free, its copies merged (merge_drain_copies). A
// group's copies of all P ranks share the link (P x its remote bytes at the copy rate) and
// the copy engine's stream operations (P x its waits and copies at the fixed cost each:
// the P side streams' operations do not overlap; counting one stream's predicted P = 4
// rows at 128-512 tokens 1.5-1.8x fast); the forward ends with the later of the compute
// and the last copy (and the P x P flag writes), then the combine reads the other ranks'
// rows of every rank back over the link at the SMs' read rate of host memory
// (`readback_bytes` / `read_GBps`; 0: the link's D). Per expert: one rank's (the others alike).
double predict_drain_us(double compute_us, const std::vector<DrainExpertCost>& experts, int experts_per_copy,
                        double row_bytes, int ranks, double readback_bytes, const burstgap::CopyCosts& copy,
                        double read_GBps, const burstgap::ModelParams& link);
// The typical copy costs on H200 for predictions without a GPU (--predict-only): as the
// host-link bench measured them (a 64 MiB copy at 55.0-55.4 GB/s; 2.7-2.9 us a stream
// operation under the HBM load, P = 2, 4, 8).
inline constexpr burstgap::CopyCosts kH200CopyCosts{2.8e-3, 55.2};
// The SMs' read rate of mapped host memory on H200, for the same predictions: every SM
// reading 256 MiB once (bench::measure_host_read_GBps), 51.0-51.3 GB/s from 8 to 132 SMs,
// idle or beside an HBM load. The drain's forward without its copies measured the HBM
// forward plus its reads back at this rate, where D (61 GB/s, a store drain) read fast.
inline constexpr double kH200HostReadGBps = 51.3;
// The model against measured rows: each row's Expert-Wave time over (compute + stall)
// as predicted when it was measured (the row's own predictions) and as this build's
// model predicts it now (predict_host_link_row again). Expert-Wave's order does not
// depend on the advisor, so the ratio tests the tile time and the stall alone. Rows
// that are not correct are left out.
// The same for the predicted speedup: |predicted / measured - 1| per row.
struct ModelCheck {
  common::Summary at_measurement, current;  // of measured / predicted, over the same rows
  common::Summary speedup_error_at_measurement, speedup_error_current;
};
// Each row is re-predicted on its own SM count, or on `sms` where it has none (rows of
// older benches); a row with neither is an error.
ModelCheck check_expert_wave_predictions(const std::vector<HostLinkRow>& measured, const burstgap::ModelParams& params,
                                         int sms);
// Bytes of combine rows that one forward of all P ranks writes over the host link: every
// (token, slot) row, bf16, hidden wide (WindowMemory::host keeps every rank's combine rows
// in host memory; the combine phase reads them back over the same link).
double host_link_combine_bytes(const BenchConfig& c);
// Over the checked rows: Interleaved / Expert-Wave where the model predicts an
// Expert-Wave stall (> 1 % of the compute), the extremes over all, the predicted
// speedup's median relative error, predicted and measured speedup where the model
// predicts a win (>= 1.1), and the combine bytes per second of Expert-Wave's forward
// (host_link_combine_bytes over its time: what the link carried at the least); over
// the rows with drain times, Interleaved with the combine drain over Expert-Wave with
// SM stores (geomean, max) and over Expert-Wave with the drain. The results file's
// `summary`; null where no row counts.
nlohmann::json host_link_summary(const std::vector<HostLinkRow>& rows);
// A row of a `--link host` results file (host_link_row's keys) back as a HostLinkRow:
// configuration, both times, the predictions and the check (not the Interleaved config).
HostLinkRow host_link_row_from_json(const nlohmann::json& r);

// The whole `xstage bench moe`: the selected rows, one table line each, the JSON
// (docs/results/moe.json format) rewritten after every row, and a PNG of the
// Interleaved / Expert-Wave speedup.
struct SweepOptions {
  std::string sweep = "standard";
  SweepFilter filter;
  std::string params;   // Burst-Gap parameters (default: xstage/data/h200_params.json)
  BenchOptions bench;
  double budget_s = 0;  // > 0: start no row after that many seconds
  std::string json = "docs/results/moe.json", png;  // empty: none (a chart only when asked for)
  std::string command;  // the command line, for the results file
  std::string link = "nvlink";  // nvlink | host (one GPU: run_host_link_sweep)
  bool predict_only = false;    // link host: the model's side of every row, no GPU (predict_host_link_sweep)
  int sms = 132;                // predict_only: the GPU's SMs (H200: 132)
};
void run_sweep(const SweepOptions& o);

// The EP = 1 rows of a results file (those of `--sweep one`: `fused_over_cublas` and
// `fused_over_cublas_exact`) as a heatmap: a row per shape (experts, top-k, hidden,
// intermediate, ascending), a column per token count, two panels per routing, uniform
// first (cuBLAS at the mean count; on the experts' own counts); NaN (grey) where no
// correct row was measured. Throws (one line) when there are no such rows or a row
// lacks its configuration. write_cublas_heatmap also throws when this build draws no
// charts (common::plot::require_charts).
common::plot::Heatmap cublas_heatmap(const nlohmann::json& results);
void write_cublas_heatmap(const nlohmann::json& results, const std::filesystem::path& png);
// `xstage bench moe --link host --predict-only`: predict_host_link_row for every selected
// row on the host (no GPU): a table, and the rows as JSON when o.json is set. What to
// measure next: where the model predicts Interleaved to win.
void predict_host_link_sweep(const SweepOptions& o);

// link host: run_host_link_bench per selected row on GPU 0 with the host-link fit; the
// summary (geomean and extremes of Interleaved over Expert-Wave where the model predicts
// an Expert-Wave stall, and the predicted speedup's median error) in the JSON's head.
void run_host_link_sweep(const SweepOptions& o);

}  // namespace xstage::moe
