// Launcher of the fused QKV projection + pre-attention All-to-All
// (sm90_qkv_fused.cu; protocol in xstage/ulysses_qkv.hpp). Plain types only, so
// host code (the layer, tests) needs no device code.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "xstage/hopper/timeout_report.hpp"
#include "xstage/ulysses_geometry.hpp"

namespace xstage::ulysses {

struct QkvArgs {
  CUtensorMap map_h;  // h [rows, C] bf16, boxes 128 rows x 64 columns, 128-B swizzle
  CUtensorMap map_w;  // W [3C, C] bf16, same boxes
  int rows = 0, rows_per_rank = 0, seq = 0, hidden = 0, heads = 0, heads_per_rank = 0;
  int rank = 0, ranks = 1, col_tiles = 0, n_tiles = 0;
  int n_entries = 0;           // length of `order`: n_tiles .. 2 n_tiles (qkv_split_tail)
  const int* order = nullptr;  // launch entries (qkv_entry: tile and heads), device
  const float *bias = nullptr, *q_norm = nullptr, *k_norm = nullptr;  // [3C], [D], [D]
  const float *cos = nullptr, *sin = nullptr;                          // [rows, D/2]
  float eps = 1e-6f;
  std::uint16_t* dst[3][kMaxRanks] = {};  // q, k, v [B, S, H/P, D] of each owner
  uint32_t* done[kMaxRanks] = {};         // owner j's completion counter for this rank
  uint32_t* ready_out[kMaxRanks] = {};    // owner j's ready flag for this rank
  const uint32_t* ready_in = nullptr;     // this rank's ready flags, one per source
  uint32_t epoch = 0;                     // launches so far, this one included
  unsigned long long timeout_ns = 0;      // budget of the ready wait
  hopper::WaitTimeoutReport* report = nullptr;
  // Who releases a finished tile (fence.acq_rel.sys, then the done counts): 1 = an
  // agent lane of the producer warpgroup (the consumers count the tile in shared
  // memory and go on while its stores drain), 0 = each consumer warpgroup's thread 0
  // at the tile's end (the warpgroup waits for the drain). Same counts either way.
  int release_by_agent = 1;
  // The agent's longest sleep while no tile is done (hopper::agent_wait_past: 128 ns
  // doubling up to this; the default is hopper::kAgentMaxSleepNs). The last release of a
  // launch comes up to this much late.
  uint32_t agent_max_sleep_ns = 256;
};

// The kernel's wait sites (WaitTimeoutReport::site).
enum class QkvWaitSite : int { stage_full = 0, stage_empty = 1, peer_ready = 2, agent = 3 };

// The shape fields of rank `rank`'s arguments (rows .. n_tiles, n_entries = n_tiles for
// an unsplit order); pointers, maps and epoch unset.
struct Problem;
QkvArgs qkv_shape_args(const Problem& p, int rank);

// Binds one projection's inputs (TMA views of h and W, the vectors) to `a`, whose
// shape fields are set; throws (one line) when an input is missing.
struct QkvInputs;
void qkv_bind_inputs(QkvArgs& a, const QkvInputs& in);

// The TMA views of h [rows, C] and W [3C, C].
CUtensorMap qkv_map_h(const void* h, int64_t rows, int64_t hidden);
CUtensorMap qkv_map_w(const void* w, int64_t hidden);

// One persistent launch of `grid` CTAs (grid <= n_entries, one CTA per SM).
void launch_qkv_fused(const QkvArgs& a, int grid, cudaStream_t stream);

// After a failed synchronisation: the timed-out wait, in one line ("" if none).
std::string qkv_explain_failure();

}  // namespace xstage::ulysses
