// Epilogue of the fused MoE kernel: a consumer warpgroup's 64 finished rows, in
// 64-column chunks staged in shared memory (144-byte rows: conflict-free; each warp
// stages and stores its own 16 rows, so only __syncwarp orders them), then 16-byte row
// stores: local H (L1: silu(gate) * up) or the REMOTE STORE of each L2 output row into
// its owner's comb[token*k + slot] (store_rows_to_owners, at the place the producer
// warp looked up when it handed the item over: no global load after the mainloop). Rows past
// the expert's count were loaded (neighbouring rows or TMA zero fill) but are never
// stored: each output row depends on its own A row only.
//
// Release: after a warpgroup barrier, thread 0 queues the tile's release in shared
// memory (mbarrier rel_full, release.cta) and the warpgroup starts its next tile; the
// release agent (lane 0 of the producer warpgroup's warp 3) takes it (acquire.cta),
// runs fence.acq_rel.sys, which waits for the tile's stores to drain (cumulative
// through the two CTA-scope synchronisations), and the red.adds: l1_done[e, m] += 1
// for an L1 tile, each owner's combine counter += its rows for an L2 tile (with the
// combine drain: l2_done[e] += 1). No consumer waits for its stores to drain.
#pragma once

#include <cstddef>
#include <cstdint>

#include "sm90_moe_fused_traits.cuh"
#include "xstage/hopper/mbarrier.cuh"
#include "xstage/sync/bf16.hpp"
#include "xstage/sync/ptx.cuh"
#include "xstage/sync/ring.cuh"
#include "xstage/sync/wait.cuh"

namespace xstage::moe::device {

// Stages 64 columns (chunk C of the 256 held: acc0 = chunks 0-1, acc1 = 2-3) of
// this warpgroup's 64 rows as bf16. L1 chunks hold silu(gate) * up instead
// (acc0 = gate, acc1 = up, chunks 0-1 only).
template <bool kSwiGLU>
__device__ __forceinline__ void stage_chunk(const float (&acc0)[64], const float (&acc1)[64], int c,
                                            std::uint16_t* staged, int warp, int g, int t) {
#pragma unroll
  for (int jj = 0; jj < 8; ++jj) {
    const int j = 8 * (c % 2) + jj;  // 8-column group in the 128-column accumulator
    float v[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if constexpr (kSwiGLU) {
        const float gv = acc0[4 * j + e];
        v[e] = __fdividef(gv, 1.0f + __expf(-gv)) * acc1[4 * j + e];  // no IEEE-division call
      } else {
        v[e] = c < 2 ? acc0[4 * j + e] : acc1[4 * j + e];
      }
    }
    const int col = 8 * jj + 2 * t;
    *reinterpret_cast<uint32_t*>(staged + (warp * 16 + g) * Shape::kStagePitch + col) = sync::pack_bf16x2(v[0], v[1]);
    *reinterpret_cast<uint32_t*>(staged + (warp * 16 + g + 8) * Shape::kStagePitch + col) =
        sync::pack_bf16x2(v[2], v[3]);
  }
}

// A lane's rows in the epilogue: warp w of a warpgroup stores its own 16 rows (the ones
// its wgmma fragments hold), lane l rows 16 w + l / 8 + 4 i (i < 4), 16 bytes at
// column 8 (l % 8) of each 64-column chunk, so staging and storing need only the warp.
constexpr int kLaneRows = 4;
__device__ __forceinline__ int lane_row(int warp, int lane, int i) { return 16 * warp + lane / 8 + 4 * i; }

// L1: this warpgroup's `rows` rows of H from row0 (local), then
// fence.proxy.async.global: the L2 tiles read H by TMA.
__device__ __forceinline__ void store_h_rows(const FusedArgs& a, const WorkItem& it, const float (&acc0)[64],
                                             const float (&acc1)[64], std::uint16_t* staged, int row0, int rows,
                                             int warp, int lane) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int c = 0; c < kL1TileN / 64; ++c) {
    __syncwarp();  // the previous chunk's reads of this warp's staged rows are done
    stage_chunk<true>(acc0, acc1, c, staged, warp, g, t);
    __syncwarp();
#pragma unroll
    for (int i = 0; i < kLaneRows; ++i) {
      const int r = lane_row(warp, lane, i);
      if (r < rows)
        *reinterpret_cast<uint4*>(a.h + static_cast<std::size_t>(row0 + r) * a.inter + it.n_block * kL1TileN +
                                  c * 64 + (lane % 8) * 8) =
            *reinterpret_cast<const uint4*>(staged + r * Shape::kStagePitch + (lane % 8) * 8);
    }
  }
  sync::fence_proxy_async_global();  // H is read by TMA (L2 tiles)
}

// REMOTE STORE (L2): each of this warpgroup's output rows into its owner's
// comb[token*k + slot], columns [n_block * 256, + 256), by the lane that holds it;
// `dest` is the warpgroup's 64 rows of the item's Barriers::dest. With the combine
// drain (a.drain_stage) the rows stay in HBM at the stage rows of their recv rows (from
// row0) instead (a local store; the owner's side stream copies them across).
__device__ __forceinline__ void store_rows_to_owners(const FusedArgs& a, const Barriers& bar, const WorkItem& it,
                                                     const float (&acc0)[64], const float (&acc1)[64],
                                                     const int* dest, std::uint16_t* staged, int row0, int warp,
                                                     int lane) {
  const int g = lane / 4, t = lane % 4;
  int d[kLaneRows], stage_row[kLaneRows];
#pragma unroll
  for (int i = 0; i < kLaneRows; ++i) {
    d[i] = dest[lane_row(warp, lane, i)];
    stage_row[i] = a.drain_stage != nullptr && d[i] != kNoDest ? a.drain_stage_row[row0 + lane_row(warp, lane, i)] : 0;
  }
#pragma unroll
  for (int c = 0; c < kL2TileN / 64; ++c) {
    __syncwarp();
    stage_chunk<false>(acc0, acc1, c, staged, warp, g, t);
    __syncwarp();
#pragma unroll
    for (int i = 0; i < kLaneRows; ++i) {
      if (d[i] == kNoDest) continue;
      const int col = it.n_block * kL2TileN + c * 64 + (lane % 8) * 8;
      std::uint16_t* dst =
          a.drain_stage != nullptr
              ? a.drain_stage + static_cast<std::size_t>(stage_row[i]) * a.hidden + col
              : bar.comb_base[d[i] % kMaxRanks] + static_cast<std::size_t>(d[i] / kMaxRanks) * a.hidden + col;
      *reinterpret_cast<uint4*>(dst) =
          *reinterpret_cast<const uint4*>(staged + lane_row(warp, lane, i) * Shape::kStagePitch + (lane % 8) * 8);
    }
  }
}

// An L2 tile's release (after the fence): adds byte o of `counts` (the tile's rows stored
// to owner o) to owner o's combine counter.
__device__ __forceinline__ void add_combine_counts(const FusedArgs& a, unsigned long long counts) {
#pragma unroll 1
  for (int o = 0; o < a.ranks; ++o) {
    const unsigned n = static_cast<unsigned>(counts >> (8 * o)) & 0xffu;
    if (n != 0) sync::red_add_relaxed_sys(static_cast<unsigned*>(window_at(a, 0, o)) + kMaxLocalExperts, n);
  }
}

// Queues a release for the agent (consumer warpgroup wg's thread 0; `rel` is its ring).
__device__ __forceinline__ void post_release(const FusedArgs& a, Barriers& bar, int wg, sync::RingPos& rel,
                                             const ReleaseReq& req) {
  sync::wait_phase(a.wait, &bar.rel_empty[wg][rel.index], rel.phase ^ 1, MoeSite::release_empty,
                   wg * Shape::kReleaseSlots + static_cast<int>(rel.index));
  bar.rel[wg][rel.index] = req;
  hopper::mbar_arrive(&bar.rel_full[wg][rel.index]);  // release.cta: the request and the tile's stores
  rel.advance<Shape::kReleaseSlots>();
}

// The release agent, one thread: takes the consumer warpgroups' queued releases in
// order (both queues in turn, each with a suspending try_wait), then one
// fence.acq_rel.sys for all it took and their red.adds. Ends when both warpgroups
// queued their stop. A tile's queue entry follows its warpgroup barrier, so the fence
// orders all of the warpgroup's stores of the tile (cumulativity) before the counts.
// Waits at most kAgentBudgets for the next entry (a consumer's own waits have
// kInCtaBudgets, plus one tile).
constexpr uint32_t kAgentPollNs = 200;
__device__ void release_agent(const FusedArgs& a, Barriers& bar) {
  sync::RingPos pos[Shape::kConsumerWGs];
  bool live[Shape::kConsumerWGs];
#pragma unroll
  for (int w = 0; w < Shape::kConsumerWGs; ++w) live[w] = true;
  int running = Shape::kConsumerWGs;
  unsigned long long idle_since = sync::global_ns();
#pragma unroll 1
  while (running > 0) {
    ReleaseReq req[Shape::kConsumerWGs];
    bool got[Shape::kConsumerWGs], fence = false, any = false;
#pragma unroll
    for (int w = 0; w < Shape::kConsumerWGs; ++w) {
      // try_wait with a short suspend-time hint: the thread sleeps in the barrier
      // instead of polling (issue slots are the consumers'), and both queues are
      // looked at within a few hundred ns.
      got[w] = live[w] && hopper::mbar_try_wait_for(&bar.rel_full[w][pos[w].index], pos[w].phase, kAgentPollNs);
      if (!got[w]) continue;
      req[w] = bar.rel[w][pos[w].index];
      hopper::mbar_arrive(&bar.rel_empty[w][pos[w].index]);
      pos[w].advance<Shape::kReleaseSlots>();
      any = true;
      fence |= req[w].kind != kReleaseStop;
    }
    if (!any) {
      if (sync::global_ns() - idle_since > sync::kAgentBudgets * a.wait.budget_ns) {
        unsigned waiting = 0;  // bit w: warpgroup w has not stopped
#pragma unroll
        for (int w = 0; w < Shape::kConsumerWGs; ++w) waiting |= live[w] ? 1u << w : 0u;
        sync::report_and_abort(a.wait, MoeSite::release_full, static_cast<int>(waiting), 0, 0);
      }
      continue;
    }
    if (fence) sync::fence_acq_rel_sys();
#pragma unroll
    for (int w = 0; w < Shape::kConsumerWGs; ++w) {
      if (!got[w]) continue;
      if (req[w].kind == kReleaseStop) {
        live[w] = false;
        --running;
      } else if (req[w].kind == kReleaseL1) {
        sync::red_add_relaxed_sys(a.l1_done + req[w].index, 1u);
      } else if (a.l2_done != nullptr) {  // the combine drain: the expert's side stream counts tiles
        sync::red_add_relaxed_sys(a.l2_done + req[w].index, 1u);
      } else {
        add_combine_counts(a, req[w].counts);
      }
    }
    idle_since = sync::global_ns();
  }
}

}  // namespace xstage::moe::device
