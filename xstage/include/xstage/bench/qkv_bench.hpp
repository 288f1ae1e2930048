// `xstage bench qkv` (CUDA builds; xstage/ulysses/qkv_bench.cpp): rank `rank`'s QKV
// projection of a Ulysses problem [1, S, H, 128] over P ranks, on GPU 0 with no peers.
// Timed in turns:
//   cublas_norm_rope: cuBLAS QKV GEMM (fp32 out) + the DiT's qk_norm_rope (bf16 q, k, v),
//     the serial path's work before its NCCL All-to-All;
//   fused_loopback: the fused QKV kernel (GEMM, norms, RoPE, stores, signals) with every
//     owner's buffers and flags local (output meaningless; no NVLink).
// Checked in the same run: the fused kernel in the one-rank layout against the cuBLAS
// path's q, k, v (max |diff|, elements beyond one bf16 step), and every owner's counter
// after loopback launches against qkv_signals_per_source.
// With a host-link fit (`--link host`), also: the same launch with every owner's q, k, v
// in its own HBM buffer, and with the other owners' in mapped pinned host memory, so the
// epilogue's stores to them cross the host link; the two must agree bitwise, and the
// host-link time is predicted as the HBM one plus the remote bytes at the fit's drain
// rate (burstgap::read_blocked_drain_ns: the stage holds the mainloop's reads).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "xstage/burstgap/burstgap.hpp"

namespace xstage::ulysses {

struct QkvBenchRow {
  int64_t seq = 0;
  int ranks = 0, heads = 0, rank = 0;
  double cublas_norm_rope_ms = 0, fused_loopback_ms = 0, tflops_fused = 0;
  double max_abs_diff = 0;
  int64_t elements_off = 0;  // not within_one_bf16_step of the cuBLAS path
  std::string count_errors;  // each miscount: release mode, order, launch, owner, counted / expected
  bool counts_ok() const { return count_errors.empty(); }
  std::string order;  // the advisor's choice and predicted stall (first group)
  int group = 0;      // the first group's m blocks per raster group (fused_loopback_ms)
  std::vector<std::pair<int, double>> fused_by_group;  // (group, fused ms) per timed order
  bool split_tail = false;     // the first group's order has a split last round (qkv_split_tail)
  double fused_unsplit_ms = 0; // that order without the split, timed in the same turns
  // The first group's order with each tile released by its consumer warpgroups
  // (QkvArgs::release_by_agent = 0) instead of the agent lane, in the same turns.
  double fused_by_consumer_ms = 0;
  // The host link (run_qkv_bench with a host-link fit), the first group's order:
  bool host_link = false;
  double owners_hbm_ms = 0;        // every owner's q, k, v in its own HBM buffer
  double fused_host_ms = 0;        // the other owners' in mapped pinned host memory
  double predicted_host_ms = 0;    // owners_hbm_ms + the remote bytes at the drain rate
  double remote_bytes = 0;         // stored to the other owners per launch
  bool host_bitwise_equal = false; // host-link outputs == HBM outputs, every owner
};

// groups: raster groups of the fused orders timed (0: qkv_raster_group); fused_loopback_ms
// is the first one's. count_checks: launches per release mode and order whose counters
// are checked (count_errors). host_link: the host-link fit (host/st16), or null for no
// host-link step.
QkvBenchRow run_qkv_bench(int64_t seq, int ranks, int heads, int rank, const burstgap::ModelParams& params,
                          int warmup, int samples, const std::vector<int>& groups = {0}, int count_checks = 1,
                          const burstgap::ModelParams* host_link = nullptr);

// The sweep: every (P, H, S) of the lists, a table line each, the results file rewritten
// after every row; fails at the end when a row's output or counts were wrong.
struct QkvSweepOptions {
  std::vector<int64_t> seqs{4096, 16384, 75776};
  std::vector<int> ranks{2, 4};
  std::vector<int> heads{24, 40};
  int rank = 0;
  int warmup = 2, samples = 7;
  std::vector<int> groups{0};
  int count_checks = 1;
  std::string link = "nvlink";  // host: also the host-link step of every row (host/st16 fit)
  std::string params;   // Burst-Gap parameters (default: xstage/data/h200_params.json)
  std::string json;     // empty: none
  std::string command;  // the command line, for the results file
};
void run_qkv_sweep(const QkvSweepOptions& o);

}  // namespace xstage::ulysses
