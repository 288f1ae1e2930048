// `xstage bench ulysses` (CUDA builds; xstage/ulysses/ulysses_bench*.cpp): one
// configuration on P GPUs, one rank's share on one GPU (--kernel-only), and the
// sweeps that print and write them.
#pragma once

#include <string>
#include <vector>

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
  int rank = 0;        // kernel_only: whose share and order
  std::string json = "docs/results/ulysses.json", png;  // empty: none (a chart only when asked for)
  std::string command;  // the command line, for the results file
};
void run_sweep(const SweepOptions& o);
void run_kernel_sweep(const SweepOptions& o);

}  // namespace xstage::ulysses
