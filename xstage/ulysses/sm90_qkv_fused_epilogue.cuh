// Epilogue of the fused QKV kernel: per head, in registers, + bias; q and k: RMSNorm
// over the head's 128 columns and the rotary turn; bf16; then the REMOTE STORE of
// each head into its owner's q, k or v (store_heads_to_owners) and the tile's release.
//
// Release: after a tile, fence.acq_rel.sys, then one red.add per head on its owner's
// completion counter for this rank. By default (release_by_agent) each consumer
// warpgroup's thread 0 only counts the tile in shared memory (release, CTA scope) and
// the release agent (lane 0 of the producer warpgroup's warp 1) fences and adds for
// both warpgroups once both counted it, so no consumer waits for its stores to drain.
// Before its first store each consumer warpgroup acquires every owner's ready flag
// (the owner has finished what preceded this launch on its stream).
#pragma once

#include <cstdint>

#include "sm90_qkv_fused_traits.cuh"
#include "xstage/hopper/mbarrier.cuh"
#include "xstage/sync/bf16.hpp"
#include "xstage/sync/ptx.cuh"
#include "xstage/sync/wait.cuh"
#include "xstage/ulysses/qkv_fused.hpp"

namespace xstage::ulysses::qkv_device {

// Acquires every owner's ready flag >= a.epoch (a peer wait: one budget).
__device__ void wait_owners_ready(const QkvArgs& a) {
#pragma unroll 1
  for (int j = 0; j < a.ranks; ++j)
    sync::wait_geq_acquire(a.wait, a.ready_in + j, a.epoch, QkvSite::peer_ready, j, sync::kPeerBudgets);
}

// Finishes one head in place. Accumulator layout (m64n128): acc[4j + e] is row
// g (e < 2) or g + 8 (e >= 2) of the warp's 16, column 8j + 2t + (e & 1).
__device__ __forceinline__ void finish_head(const QkvArgs& a, float (&acc)[64], int gh, int row_g, int t) {
  const int part = gh / a.heads, head = gh % a.heads;
  const float* bias = a.bias + static_cast<int64_t>(part) * a.hidden + head * kQkvHeadDim;
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const int col = 8 * j + 2 * t;
    acc[4 * j + 0] += bias[col];
    acc[4 * j + 1] += bias[col + 1];
    acc[4 * j + 2] += bias[col];
    acc[4 * j + 3] += bias[col + 1];
  }
  if (part == 2) return;
  float ss0 = 0.f, ss1 = 0.f;
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    ss0 += acc[4 * j] * acc[4 * j] + acc[4 * j + 1] * acc[4 * j + 1];
    ss1 += acc[4 * j + 2] * acc[4 * j + 2] + acc[4 * j + 3] * acc[4 * j + 3];
  }
  ss0 += __shfl_xor_sync(0xffffffffu, ss0, 1);
  ss0 += __shfl_xor_sync(0xffffffffu, ss0, 2);
  ss1 += __shfl_xor_sync(0xffffffffu, ss1, 1);
  ss1 += __shfl_xor_sync(0xffffffffu, ss1, 2);
  const float inv0 = rsqrtf(ss0 / float(kQkvHeadDim) + a.eps), inv1 = rsqrtf(ss1 / float(kQkvHeadDim) + a.eps);
  const float* w = part == 0 ? a.q_norm : a.k_norm;
  constexpr int kPairs = kQkvHeadDim / 2;
  const float* cs0 = a.cos + static_cast<int64_t>(row_g) * kPairs;
  const float* sn0 = a.sin + static_cast<int64_t>(row_g) * kPairs;
  const float* cs1 = cs0 + 8 * kPairs;
  const float* sn1 = sn0 + 8 * kPairs;
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const int col = 8 * j + 2 * t, pair = col / 2;
    const float w0 = w[col], w1 = w[col + 1];
    float x0 = acc[4 * j] * inv0 * w0, x1 = acc[4 * j + 1] * inv0 * w1;
    acc[4 * j] = x0 * cs0[pair] - x1 * sn0[pair];
    acc[4 * j + 1] = x0 * sn0[pair] + x1 * cs0[pair];
    x0 = acc[4 * j + 2] * inv1 * w0;
    x1 = acc[4 * j + 3] * inv1 * w1;
    acc[4 * j + 2] = x0 * cs1[pair] - x1 * sn1[pair];
    acc[4 * j + 3] = x0 * sn1[pair] + x1 * cs1[pair];
  }
}

// Stores this warpgroup's 64 rows of one finished head into its owner (staged in
// shared memory 64 columns at a time, then 16-byte stores of whole rows).
__device__ __forceinline__ void store_head_to_owner(const QkvArgs& a, const float (&acc)[64], int gh, int row0,
                                                    std::uint16_t* staged, int epi_bar, int tid) {
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int part = gh / a.heads, head = gh % a.heads, owner = head / a.heads_per_rank;
  std::uint16_t* dst = a.dst[part][owner];
#pragma unroll
  for (int c = 0; c < 2; ++c) {
    hopper::named_sync(epi_bar, 128);  // the previous chunk's reads of `staged` are done
#pragma unroll
    for (int jj = 0; jj < 8; ++jj) {
      const int j = 8 * c + jj, col = 8 * jj + 2 * t;
      *reinterpret_cast<uint32_t*>(staged + (warp * 16 + g) * kStagePitch + col) =
          sync::pack_bf16x2(acc[4 * j], acc[4 * j + 1]);
      *reinterpret_cast<uint32_t*>(staged + (warp * 16 + g + 8) * kStagePitch + col) =
          sync::pack_bf16x2(acc[4 * j + 2], acc[4 * j + 3]);
    }
    hopper::named_sync(epi_bar, 128);
    for (int i = tid; i < 64 * 8; i += 128) {  // remote when owner != rank
      const int r = i / 8, q = i % 8;
      const int64_t off = qkv_dest_offset(row0 + r, head, a.rank, a.rows_per_rank, a.seq, a.heads_per_rank);
      *reinterpret_cast<uint4*>(dst + off + c * 64 + q * 8) =
          *reinterpret_cast<const uint4*>(staged + r * kStagePitch + q * 8);
    }
  }
}

// REMOTE STORE of launch entry e's heads (one, or both of column tile ct) for this
// warpgroup's rows [row0, row0 + 64): each finished, then stored into its owner.
__device__ __forceinline__ void store_heads_to_owners(const QkvArgs& a, float (&acc0)[64], float (&acc1)[64], int e,
                                                      int row0, std::uint16_t* staged, int epi_bar, int tid) {
  const int tile = qkv_entry_tile(e), sel = qkv_entry_sel(e), ct = tile % a.col_tiles;
  const int row_g = row0 + (tid / 32) * 16 + (tid % 32) / 4, t = tid % 4;
  const int gh0 = 2 * ct, gh1 = 2 * ct + 1;
  {
    const int gh = gh0 + (sel == 2 ? 1 : 0);  // a second-head entry: its head is in acc0
    finish_head(a, acc0, gh, row_g, t);
    store_head_to_owner(a, acc0, gh, row0, staged, epi_bar, tid);
  }
  if (sel == 0 && gh1 < 3 * a.heads) {
    finish_head(a, acc1, gh1, row_g, t);
    store_head_to_owner(a, acc1, gh1, row0, staged, epi_bar, tid);
  }
}

// Adds `v` to the done counter of each head's owner of launch entry e.
__device__ __forceinline__ void add_entry_counts(const QkvArgs& a, int e, uint32_t v) {
  const int tile = qkv_entry_tile(e), sel = qkv_entry_sel(e), ct = tile % a.col_tiles;
  const int gh0 = 2 * ct, gh1 = 2 * ct + 1;
  const bool second = sel == 0 && gh1 < 3 * a.heads;
#pragma unroll 1
  for (int h = 0; h < (second ? 2 : 1); ++h)
    sync::red_add_relaxed_sys(a.done[qkv_owner(h == 0 && sel != 2 ? gh0 : gh1, a.heads, a.heads_per_rank)], v);
}

// The release of an entry by its warpgroup (after the warpgroup barrier that follows
// every store of it; thread 0): counted for the agent, or fenced and added here.
__device__ __forceinline__ void release_entry(const QkvArgs& a, Barriers& bar, int e, int wg) {
  if (a.release_by_agent) {
    sync::smem_add_release(&bar.tiles_done[wg], 1);
  } else {
    sync::fence_acq_rel_sys();
    add_entry_counts(a, e, 1u);
  }
}

// The release agent, one thread: walks the CTA's entries; whenever both consumer
// warpgroups counted more tiles than it has released, one fence.acq_rel.sys, then the
// counts of those entries for both warpgroups. The consumers' stores precede their
// barrier and the release add that the acquire load here sees (cumulativity).
__device__ void release_agent(const QkvArgs& a, Barriers& bar) {
  uint32_t released = 0;
  int i = blockIdx.x;
#pragma unroll 1
  while (i < a.n_entries) {
    const uint32_t done = sync::agent_wait_past<kConsumerWGs>(a.wait, bar.tiles_done, released, QkvSite::agent);
    sync::fence_acq_rel_sys();
#pragma unroll 1
    for (; released < done && i < a.n_entries; ++released, i += gridDim.x)
      add_entry_counts(a, a.order[i], kConsumerWGs);
  }
}

}  // namespace xstage::ulysses::qkv_device
