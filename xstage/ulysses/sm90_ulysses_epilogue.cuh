// The fused post-attention All-to-All: an epilogue policy of the attention
// kernel (attention/sm90_flash_fwd_epilogue.cuh) that stores each finished
// output slice straight into its owner's output and counts it there.
//
// Protocol (rank r computes heads r·H/P .. for all S rows; docs/xstage-ulysses.md):
//   store    store_tile_to_owner copies the staged 64 x D slice (query rows row0 .., local
//            head h) with 16-byte st.global to target(): the owner's output
//            [B, S/P, H, D] in its symmetric window, reached through the LSA
//            pointer out[owner], at row row0 - owner·S/P, head r·H/P + h
//            (fused_target, xstage/ulysses/geometry.hpp). The owner may be r itself.
//   signal   three modes (FusedSignal, chosen per launch; same stores):
//            per_cta: each consumer warpgroup, once after its last slice:
//              warpgroup barrier, then thread 0 runs fence.acq_rel.sys and one
//              red.relaxed.sys.add of 1 to every owner's counter, whether or not
//              it sent that owner a slice: the counter counts finished
//              warpgroups, and an owner waits for all of a source's warpgroups
//              that had a tile (fused_signals_per_forward). The fence waits for
//              the warpgroup's remote stores to drain, but only once, when the
//              warpgroup has no tile left to compute.
//            per_slice: after each slice: warpgroup barrier, thread 0
//              fence.acq_rel.sys, red.relaxed.sys.add of 1 to counter[owner]. The
//              fence stalls the warpgroup until the slice's remote stores drain
//              (measured: 4-19% over attention alone at D = 128, S >= 16K on x2).
//            by_agent: after each slice: warpgroup barrier, thread 0 adds 1 to the
//              warpgroup's slice count in shared memory (release, CTA scope) and
//              the warpgroup goes on. The kernel's agent lane (producer warpgroup)
//              sees the count (acquire), runs fence.acq_rel.sys, which waits for
//              the drain off the consumers' path, and adds the tile's slices to
//              counter[owner] (tile_done): the same counts as per_slice.
//            With FusedGeometry::chunk_rows the per_slice and by_agent counts go to
//            the counter of the slice's chunk of its owner's rows instead (slice_counter:
//            a copy-engine drain copies each chunk once its count is complete).
//            Either way the fence orders the whole warpgroup's stores (cumulativity
//            through the barrier) before the count: whoever reads the count with
//            acquire sees the rows. counter[owner] is the owner's counter for
//            source rank r.
//   wait     receiver-complete only, after the kernel on the owner's stream: one
//            thread per source rank acquires counter[src] >= the cumulative count
//            src has signalled so far, slices (per_slice) or warpgroups (per_cta)
//            (counters only grow, so a late or early launch is never mistaken for
//            another), with a timeout that names the rank and the source's
//            counter (ulysses_fused.cu).
// No other kernel, warp or SM moves data: the stores come from the consumer
// warpgroups that computed the slice, between two tiles.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "xstage/attention/sm90_flash_fwd_epilogue.cuh"
#include "xstage/sync/ptx.cuh"
#include "xstage/ulysses/geometry.hpp"

namespace xstage::ulysses::sm90 {

struct RemoteStoreParams {
  __nv_bfloat16* out[kMaxRanks];  // each owner's output [B, S/P, H, D] (LSA pointers; out[r] is local)
  uint32_t* counter[kMaxRanks];   // each owner's slice counter for this source rank (LSA pointers)
  FusedGeometry geo;              // rows per rank, ranks, this rank's head offset, output strides
};

// REMOTE STORE: this warpgroup's staged slice of a tile (rows [row0, row0 + 64) of local
// head h) into its owner's output, 16-byte stores through the LSA pointer (the owner
// may be this rank). S/P % 128 == 0, so the slice has one owner.
template <int D>
__device__ __forceinline__ void store_tile_to_owner(const RemoteStoreParams& p, const attention::sm90::OutputSlice& s,
                                                    const __nv_bfloat16* staged, int pitch, int tid) {
  const FusedTarget t = fused_target(p.geo, s.batch, s.head, s.row0);
  attention::sm90::store_staged_slice<D>({p.out[t.owner] + t.offset, p.geo.stride_s}, s.rows, staged, pitch, tid);
}

// The counter a slice of rows from row0 counts on: its owner's, or that of its chunk of
// the owner's rows (FusedGeometry::chunk_rows).
__device__ __forceinline__ uint32_t* slice_counter(const RemoteStoreParams& p, int row0) {
  return p.counter[slice_owner(p.geo, row0)] + slice_chunk(p.geo, row0);
}

template <attention::sm90::Signal kMode>
struct RemoteStoreEpilogue {
  using Params = RemoteStoreParams;
  static constexpr attention::sm90::Signal kSignal = kMode;

  template <int D>
  __device__ __forceinline__ static void store(const Params& p, const attention::sm90::OutputSlice& s,
                                               const __nv_bfloat16* staged, int pitch, int tid) {
    store_tile_to_owner<D>(p, s, staged, pitch, tid);
  }
  __device__ __forceinline__ static void store_lse(const Params&, const attention::sm90::OutputSlice&, int, float) {}

  __device__ __forceinline__ static void slice_done(const Params& p, const attention::sm90::OutputSlice& s, int tid) {
    if (tid == 0) {
      sync::fence_acq_rel_sys();
      sync::red_add_relaxed_sys(slice_counter(p, s.row0), 1);
    }
  }

  // The agent, after its fence: the tile's `slices` slices of 64 rows from m0 (one
  // owner when (S/P) % 128 == 0, which fused_geometry's problems always have; one chunk
  // when chunk_rows % 128 == 0).
  __device__ __forceinline__ static void tile_done(const Params& p, const attention::WorkTile& w, int block_m,
                                                   int slices) {
    const int m0 = w.m_block * block_m;
    uint32_t* first = slice_counter(p, m0);
    if (first == slice_counter(p, m0 + 64 * (slices - 1))) {
      sync::red_add_relaxed_sys(first, slices);
      return;
    }
#pragma unroll 1
    for (int s = 0; s < slices; ++s) sync::red_add_relaxed_sys(slice_counter(p, m0 + 64 * s), 1);
  }

  __device__ __forceinline__ static void worker_done(const Params& p, int tid) {
    if (tid != 0) return;
    sync::fence_acq_rel_sys();
#pragma unroll 1
    for (int owner = 0; owner < p.geo.ranks; ++owner) sync::red_add_relaxed_sys(p.counter[owner], 1);
  }
};

}  // namespace xstage::ulysses::sm90
