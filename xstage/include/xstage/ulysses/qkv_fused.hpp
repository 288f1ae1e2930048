// Launcher of the fused QKV projection + pre-attention All-to-All
// (sm90_qkv_fused.cu; protocol in xstage/ulysses/qkv.hpp). Plain types only, so
// host code (the layer, tests) needs no device code.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <iterator>
#include <string>

#include "xstage/sync/report.hpp"
#include "xstage/ulysses/geometry.hpp"

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
  sync::WaitContext wait;                 // set by launch_qkv_fused (process-wide report, this rank)
  // Who releases a finished tile (fence.acq_rel.sys, then the done counts): 1 = an
  // agent lane of the producer warpgroup (the consumers count the tile in shared
  // memory and go on while its stores drain), 0 = each consumer warpgroup's thread 0
  // at the tile's end (the warpgroup waits for the drain). Same counts either way.
  int release_by_agent = 1;
};

// The kernel's wait sites (sync::WaitReport::site) and their names.
enum class QkvSite : int { stage_full, stage_empty, peer_ready, agent };
inline constexpr const char* kQkvSiteNames[] = {
    "mbarrier full (consumer waits for the TMA bytes of stage {index})",
    "mbarrier empty (producer waits for the consumers to free stage {index})",
    "ready flag of owner rank {index} (that rank has not started this launch: slow, stopped or absent; "
    "expected = this launch's number)",
    "release agent (no tile finished; expected = tiles released + 1, seen = the lowest count)",
};
inline constexpr sync::SiteNames kQkvSites{sync::Kernel::qkv, "fused QKV", kQkvSiteNames,
                                           static_cast<int>(std::size(kQkvSiteNames))};

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

// One persistent launch of `grid` CTAs (grid <= n_entries, one CTA per SM); sets the
// launch's QkvArgs::wait (the budget of sync::wait_budget_ns, the process-wide report).
void launch_qkv_fused(const QkvArgs& a, int grid, cudaStream_t stream);

// After a failed synchronisation: the timed-out wait, in one line ("" if none). The
// report is the process-wide one: a wait of another kernel (attention, the Ulysses
// receiver) is named too (sync::take_report).
std::string qkv_explain_failure();

}  // namespace xstage::ulysses
