// `xstage bench ulysses` (CUDA builds; xstage/ulysses/ulysses_bench*.cpp): one
// configuration on P GPUs, one rank's share on one GPU (--kernel-only), and the
// sweeps that print and write them.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/stats.hpp"
#include "xstage/burstgap/burstgap.hpp"
#include "xstage/ulysses/ulysses.hpp"

namespace xstage::ulysses {

struct BenchRow {
  BenchConfig config;
  // Medians (ms) of the post-attention part, the slowest rank's.
  double pre_a2a_ms = 0;         // the pre-attention All-to-All of Q, K, V (common to every path; not in the others)
  double attention_ms = 0;       // attention alone, no exchange
  double serial_ms = 0;          // attention, then ncclSend/Recv back and unpack
  double coarse_ms = 0;          // attention per owner slice, each slice's exchange on a second stream
  double fused_sender_ms = 0;    // fused kernel (sends issued), the layer's default signal (`signal`)
  double fused_per_cta_ms = 0;   // sender-visible with one fence + counter add per warpgroup at its end
  double fused_per_slice_ms = 0; // the same with a fence + counter add after every slice (sender-visible)
  double fused_by_agent_ms = 0;  // the per-slice counts, fenced and added by the agent lane (sender-visible)
  std::string signal;            // default_signal(problem): what fused_sender_ms used
  double fused_loopback_ms = 0;  // the fused kernel with all targets local (no NVLink): its own cost
  double attention_fused_order_ms = 0;  // attention alone in the fused kernel's tile order
  double fused_receiver_ms = 0;  // fused kernel + wait until every source's slices arrived
  double speedup_vs_serial = 0;  // serial / fused sender-visible
  double predicted_stall_us = 0; // the Burst-Gap model, per SM, for the chosen order
  double measured_stall_us = 0;  // fused sender-visible - attention alone
  double nvlink_GBps = 0;        // bytes this rank stores to peers / fused sender-visible time
  bool fused_equal = false;      // fused output == serial output bitwise, every rank, both completions, every signal
  bool coarse_equal = false;     // coarse output == serial output bitwise, every rank
  std::string order;             // the chosen tile order and the advisor's reasoning (rank 0)
};

struct BenchOptions {
  int warmup = 2;
  int samples = 5;  // timed samples per path (the same on every rank: they issue the same collectives)
};

BenchRow run_bench(const BenchConfig& c, const burstgap::ModelParams& params, const BenchOptions& o);

// The fused kernel's own cost on one GPU, no NCCL and no peer (`xstage bench ulysses
// --kernel-only`): rank `rank`'s share of the problem (all S rows, H/P heads), its
// advisor-chosen order, and the fused kernel with every owner's pointer and counter
// local (loopback; the output is meaningless). Separates what the remote-store
// kernel costs by its tile order from what it costs by its code, for any P on one GPU.
struct KernelRow {
  BenchConfig config;
  int rank = 0;
  double attention_ms = 0;              // local-store kernel, head_major (flash_fwd's own choice)
  double attention_fused_order_ms = 0;  // local-store kernel, the fused order
  double loopback_per_cta_ms = 0;       // remote-store kernel, fused order, per-CTA signal
  double loopback_per_slice_ms = 0;     // remote-store kernel, fused order, per-slice signal
  double loopback_by_agent_ms = 0;      // remote-store kernel, fused order, the agent's signal
  double loopback_head_major_ms = 0;    // remote-store kernel, head_major order, per-CTA signal
  bool fused_order_equal = false;       // attention in the fused order == head_major, bitwise
  // One launch per signal mode from zeroed counters: every owner's counter holds what
  // fused_signals_per_forward says that mode adds (what the receiver waits for).
  bool signal_counts_ok = false;
  std::string signal_counts;            // "per_cta a/b, per_slice c/d, by_agent e/f" (counted / expected, every owner)
  std::string order;                    // the chosen order and the advisor's reasoning
};
// Each variant: `reps` samples, taken in turns with the other variants.
KernelRow run_kernel_bench(const BenchConfig& c, int rank, const burstgap::ModelParams& params, int warmup, int reps);

// `xstage bench ulysses --link host` (xstage/ulysses/ulysses_host_link.cpp): rank `rank`'s
// share of a P-rank layer on one GPU with the fused epilogue's stores to the other P - 1
// owners going over the host link (their outputs in mapped pinned host memory; this
// rank's output, inputs, compute and the completion counters in HBM). The advisor's order against
// head_major (row-major) and against the exchange after attention, with the model's
// predicted stalls beside the measured times. Times in ms, stalls in us.
struct HostLinkRow {
  BenchConfig config;
  int rank = 0;
  std::string order;                     // the SM-store advisor's tile order and its reasoning
  int guided_run = 0;                    // its slice run (0: it kept head_major)
  std::string schedule;                  // the advisor's schedule: "copy_engine_drain" or "sm_stores"
  double attention_guided_ms = 0;        // attention alone (local stores), the SM-store advisor's order
  double attention_row_major_ms = 0;     // the same, head_major order
  double attention_owner_ms = 0;         // the same, the drain's owner_major order and chunks
  double fused_sm_guided_ms = 0;         // fused kernel, SM stores over the host link, the advisor's tile order
  double fused_row_major_ms = 0;         // the same, head_major order
  double fused_ce_drain_ms = 0;          // owner_major order, rows staged in HBM, the copy engine drains them
                                         // in the advisor's chunks (drain_chunk_blocks)
  double fused_ce_owner_ms = 0;          // the same drain with one chunk (one copy) per owner
  int drain_chunk_blocks = 0;            // the advisor's drain chunk, 128-row blocks (0: one per owner)
  double copy_op_us = 0;                 // measured: one stream operation (a wait or a 2-D copy)
  double copy_GBps = 0;                  // measured: the copy engine's rate for this rank's rows of the remote
                                         // owners (whole-owner 2-D copies at the output's row pitch)
  double fused_guided_ms = 0;            // the advisor's schedule (one of the two above)
  double exchange_after_ms = 0;          // attention, then a copy-engine copy to each remote owner
  double predicted_sm_stores_ms = 0;     // attention + remote bytes / D (the stores hold every SM's reads)
  double predicted_ce_drain_ms = 0;      // predict_copy_engine_drain_ms, the advisor's chunks
  double predicted_ce_owner_ms = 0;      // the same, one chunk per owner
  double predicted_stall_guided_us = 0;  // the advisor's schedule's predicted time over attention
  double predicted_stall_row_major_us = 0;
  double remote_bytes = 0;               // stored to the other owners per forward
  bool bitwise_equal = false;            // both host-link schedules == all-HBM outputs, every owner
  // From the above (finish_host_link_row):
  double speedup_vs_row_major = 0;            // fused_row_major / fused_guided
  double predicted_speedup_vs_row_major = 0;  // (attention + stall) row-major over the same guided
  double speedup_vs_exchange_after = 0;       // exchange_after / fused_guided
  bool stall_predicted = false;               // row-major's predicted stall > 1 % of its attention time
  double link_GBps = 0;                       // remote bytes / fused_guided time
  double hiding_bound_vs_row_major = 0;       // fused_row_major / attention alone in the fastest of its three
                                              // orders: the speedup of hiding every remote byte
  int sms = 0;                                // the GPU's SMs (0: not recorded), for the kernel's rounds
  double achievable_ms = 0;                   // set_achievable_bound (0: the row cannot give it)
  double achievable_bound_vs_row_major = 0;   // fused_row_major / achievable_ms
};
// What a rank's share of `p` stores to the other P - 1 owners per forward: (P - 1) x B x
// S/P x H/P x D x 2 bytes.
double rank_remote_bytes(const Problem& p);
// The host link's stores hold the reads of every SM while the stage drains
// (burstgap::read_blocked_drain_ns), so attention, which streams K and V, pays for the
// remote bytes in full: attention + remote bytes / D, D the link fit's drain rate.
double predict_sm_stores_ms(double attention_ms, double remote_bytes, const burstgap::ModelParams& link);
// What one copy of the drain costs, as the bench measures it before a row
// (bench::measure_copy_costs): the fixed cost of a stream operation (ms; a chunk has two,
// its wait and its copy) and the copy engine's rate for this rank's rows (GB/s; 0: the
// link fit's drain rate D). A rank writes 1/P of each row of an
// owner's output, and the copy engine moves such narrow rows slower than D (the exchange
// after attention in docs/results/host_link.json: mostly 30-45 GB/s at P = 8, 45-60 at
// P = 2).
using CopyCosts = burstgap::CopyCosts;
// The copy-engine drain: tiles in owner_major order in chunks of `chunk_blocks` row
// blocks (0: one per owner) on `grid` CTAs (static persistent schedule, uniform tiles: a
// chunk's rows are done at the end of the round of its last tile), then each remote
// owner's chunks leave in that order, one copy after another, each two operations' fixed
// cost plus its bytes at the copy rate; the forward ends with the later of attention and the last
// copy.
double predict_copy_engine_drain_ms(const Problem& p, int rank, int grid, double attention_ms,
                                    const burstgap::ModelParams& link, int chunk_blocks = 0, CopyCosts copy = {});
// The drain's chunk with the least predicted time among one chunk per owner and
// power-of-two divisors of an owner's row blocks; a finer chunk must win by more than 1 %.
int choose_drain_chunk_blocks(const Problem& p, int rank, int grid, double attention_ms,
                              const burstgap::ModelParams& link, CopyCosts copy);
// The advisor's choice between the two host-link schedules (the smaller predicted time;
// within 1 % to SM stores), the drain predicted with the row's drain_chunk_blocks,
// copy_op_us, copy_GBps and attention in its own order (attention_owner_ms where
// measured), and the row's predicted stalls from it (over attention in head_major order).
void advise_host_link_schedule(HostLinkRow& row, int grid, const burstgap::ModelParams& link);
// drain_chunk_blocks >= 0 fixes the drain's chunk (0: one per owner) instead of the advisor's.
HostLinkRow run_host_link_bench(const BenchConfig& c, int rank, const burstgap::ModelParams& params, int warmup,
                                int reps, int drain_chunk_blocks = -1);
// The least time any schedule of this kernel's tiles can give a measured row. A tile's
// rows exist only when it ends; with the static rounds (the rank's B x S/kTileRows x H/P
// uniform tiles on min(tiles, sms) CTAs) the first remote bytes leave after one round of
// attention (the fastest of its three orders), and all of them take rank_remote_bytes at
// the copy rate (copy_GBps, or where a row has none its exchange after attention); the
// forward ends no earlier than attention, and row-major SM stores, as measured, are
// always achievable:
//   achievable = min(fused_row_major, max(attention, attention / rounds + bytes / rate)).
// Sets achievable_ms and achievable_bound_vs_row_major (both 0 where the row has no sms,
// no attention time or no copy rate).
void set_achievable_bound(HostLinkRow& row);
// Fills the derived fields of a measured row (host only), set_achievable_bound's too.
void finish_host_link_row(HostLinkRow& row);
// Over rows: the geometric mean of the measured speedup over row-major where the model
// predicts a stall (-1: no such row) and of the hiding and achievable bounds over the same
// rows, the median |predicted - measured| / measured speedup (-1: no rows), and the
// advisor's drain chunks over one chunk per owner.
struct HostLinkSummary {
  double geomean_where_stall_predicted = -1;
  int rows_where_stall_predicted = 0;
  double speedup_prediction_median_abs_rel_error = -1;
  double min_speedup = 0, max_speedup = 0;
  double hiding_bound_geomean = -1;              // hiding_bound_vs_row_major, the same rows as the geomean
  // achievable_bound_vs_row_major, and the speedup over it (the share of it reached), over
  // the rows of the geomean that have one (-1: none)
  double achievable_bound_geomean = -1, speedup_over_achievable_geomean = -1;
  double chunked_over_owner_drain_geomean = -1;  // fused_ce_owner / fused_ce_drain over rows with both (-1: none)
};
HostLinkSummary summarize_host_link(const std::vector<HostLinkRow>& rows);
// The drain's time model on measured rows: measured over predicted drain time, for the
// advisor's chunks and for one chunk per owner of each row, as predicted when measured
// (the row's predicted_ce_*_ms) and as this build predicts it, on the row's SM count (or
// `sms` for a row without one; a row with neither is an error).
// A row without copy_GBps (measured before the bench recorded it) takes its copy rate
// from its exchange after attention: the P - 1 whole-owner copies back to back.
struct DrainModelCheck {
  common::Summary at_measurement, current;                      // measured / predicted
  double at_measurement_median_abs_rel_error = -1, current_median_abs_rel_error = -1;
};
DrainModelCheck check_drain_predictions(const std::vector<HostLinkRow>& rows, const burstgap::ModelParams& link,
                                        int sms);
// A row of a `--link host` results file (host_link_row's keys) back as a HostLinkRow: its
// configuration, rank, drain chunks, sms, the times and costs the drain check and the
// achievable bound read, the measured speedup and whether a stall was predicted (a key a
// row lacks reads as 0 or false); the rest stays default.
HostLinkRow host_link_row_from_json(const nlohmann::json& j);

// The sweep of `xstage bench ulysses` (bench_sweep: S in [min_seq, max_seq], P in
// `ranks`): a table line per configuration, the JSON (docs/results/ulysses.json
// format) rewritten after every row and the PNG of the speedup over serial vs S.
// P above the visible GPUs are skipped with a note. kernel_only: run_kernel_bench
// of rank `rank` instead, on GPU 0 (its JSON only when json is given).
struct SweepOptions {
  std::vector<int> ranks{2, 4};
  int64_t min_seq = 4096, max_seq = 131072;
  std::string params;  // Burst-Gap parameters (default: xstage/data/h200_params.json)
  int warmup = 2, samples = 5;
  bool torch = true;   // the LibTorch SDPA baseline, when built in
  bool kernel_only = false;
  std::string link = "nvlink";  // nvlink | host (one GPU, run_host_link_sweep)
  int rank = 0;        // kernel_only and link host: whose share and order
  std::string json = "docs/results/ulysses.json", png;  // empty: none (a chart only when asked for)
  std::string command;  // the command line, for the results file
};
void run_sweep(const SweepOptions& o);
void run_kernel_sweep(const SweepOptions& o);
// link host: run_host_link_bench per configuration on GPU 0, with the host-link fit
// (pattern host, st16); the summary (summarize_host_link) into the JSON's head.
void run_host_link_sweep(const SweepOptions& o);

}  // namespace xstage::ulysses
