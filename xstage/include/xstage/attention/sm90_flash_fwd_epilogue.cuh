// Epilogue policies of the attention forward kernel: "store this finished output
// slice to (pointer, strides)".
//
// The kernel normalises O, stages one consumer warpgroup's 64 x D slice in
// shared memory as bf16 (row pitch D + 8 elements, conflict-free for the
// fragment writes and the 16-byte reads), synchronises the warpgroup, and then
// hands the slice to the policy. A policy is a type with:
//
//   struct Params;                                  // by value inside the kernel parameters
//   static constexpr Signal kSignal;               // when the policy's completion hooks run
//   template <int D> static void store(const Params&, const OutputSlice&,
//                                      const __nv_bfloat16* staged, int pitch, int tid);
//       copies the staged slice (rows x D, `pitch` elements per row) to where it
//       goes; all 128 threads of the warpgroup (store_staged_slice does the copy)
//   static void store_lse(const Params&, const OutputSlice&, int r, float lse);
//   static void slice_done(const Params&, const OutputSlice&, int tid);
//       Signal::per_slice: all 128 threads, after a warpgroup barrier that follows
//       every store of the slice
//   static void worker_done(const Params&, int tid);
//       Signal::at_exit: all 128 threads of a consumer warpgroup, once, after its
//       last slice (StaticPersistentScheduler::is_last) and a warpgroup barrier
//   static void tile_done(const Params&, const WorkTile&, int block_m, int slices);
//       Signal::by_agent: one thread of the producer warpgroup (the agent), once per
//       tile in the CTA's order, after every consumer warpgroup stored its slice of
//       it and after the agent's own fence.acq_rel.sys; the consumers only count
//       their finished slices in shared memory (release, CTA scope) and go on
//
// LocalStoreEpilogue writes into this GPU's O. The Ulysses remote store
// (ulysses/sm90_ulysses_epilogue.cuh) is the same copy with a peer's base pointer from
// target() and a release of the owner's counter; the mainloop does not change.
//
// Below the policies: the kernel's side of the epilogue (stage, store, signal; and the
// release agent of Signal::by_agent).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "xstage/attention/sm90_flash_fwd_traits.cuh"
#include "xstage/hopper/mbarrier.cuh"
#include "xstage/sync/bf16.hpp"
#include "xstage/sync/ptx.cuh"
#include "xstage/sync/wait.cuh"

namespace xstage::attention::sm90 {

// When an epilogue policy signals completion (see the interface above).
enum class Signal { none, per_slice, at_exit, by_agent };

// One consumer warpgroup's share of a finished CTA tile.
struct OutputSlice {
  int batch;
  int head;
  int row0;  // first query row
  int rows;  // valid rows (0..64): rows past Sq are not stored
};

struct StoreTarget {
  __nv_bfloat16* base;  // element (row 0, column 0) of the slice
  int64_t row_stride;   // elements between consecutive rows
};

// Copies the staged [rows x D] slice with 16-byte loads and stores; 128 threads.
template <int D>
__device__ __forceinline__ void store_staged_slice(const StoreTarget& dst, int rows, const __nv_bfloat16* staged,
                                                   int pitch, int tid) {
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
#pragma unroll 4
  for (int i = tid; i < 64 * kChunks; i += 128) {
    const int r = i / kChunks, c = i % kChunks;
    if (r < rows) {
      const uint4 v = *reinterpret_cast<const uint4*>(staged + r * pitch + c * 8);
      *reinterpret_cast<uint4*>(dst.base + r * dst.row_stride + c * 8) = v;
    }
  }
}

// Stores into a local [B, S, H, D] tensor and an optional dense [B, H, Sq] LSE.
struct LocalStoreEpilogue {
  struct Params {
    __nv_bfloat16* o;                       // output base
    int64_t stride_b, stride_s, stride_h;   // element strides of O
    float* lse;                              // nullptr: no LSE output
    int64_t lse_stride_b, lse_stride_h;      // element strides of the LSE (row stride 1)
  };
  static constexpr Signal kSignal = Signal::none;

  template <int D>
  __device__ __forceinline__ static void store(const Params& p, const OutputSlice& s, const __nv_bfloat16* staged,
                                               int pitch, int tid) {
    const StoreTarget dst{p.o + s.batch * p.stride_b + s.head * p.stride_h + static_cast<int64_t>(s.row0) * p.stride_s,
                          p.stride_s};
    store_staged_slice<D>(dst, s.rows, staged, pitch, tid);
  }
  __device__ __forceinline__ static void store_lse(const Params& p, const OutputSlice& s, int r, float lse) {
    if (p.lse) p.lse[s.batch * p.lse_stride_b + s.head * p.lse_stride_h + s.row0 + r] = lse;
  }
  __device__ __forceinline__ static void slice_done(const Params&, const OutputSlice&, int) {}
};

// ---- the kernel's epilogue ----------------------------------------------------------

// Stages this warpgroup's normalised 64 x D slice as bf16 in `staged` (pitch kOPitch);
// fragment layout as in sm90_flash_fwd_softmax.cuh.
template <class T>
__device__ __forceinline__ void stage_slice(const float (&o)[T::kHeadDim / 2], __nv_bfloat16* staged, int warp,
                                            int g, int t) {
#pragma unroll
  for (int jj = 0; jj < T::kHeadDim / 8; ++jj) {
    const int col = 8 * jj + 2 * t;
    *reinterpret_cast<uint32_t*>(staged + (warp * 16 + g) * T::kOPitch + col) =
        sync::pack_bf16x2(o[4 * jj], o[4 * jj + 1]);
    *reinterpret_cast<uint32_t*>(staged + (warp * 16 + g + 8) * T::kOPitch + col) =
        sync::pack_bf16x2(o[4 * jj + 2], o[4 * jj + 3]);
  }
}

// One finished slice of tile w: stage it, the policy's store (local, or the REMOTE STORE
// of the Ulysses policy) and LSE, then its signal. The warpgroup barrier epi_bar
// brackets the staging; tid: 0..127 in the warpgroup.
template <class T, class Epilogue>
__device__ __forceinline__ void consumer_epilogue(const FlashFwdParams<Epilogue>& p, PipelineBarriers<T>& bar,
                                                  const WorkTile& w, const float (&o)[T::kHeadDim / 2],
                                                  const float (&lse)[2], __nv_bfloat16* staged, int epi_bar, int wg,
                                                  int r0, int row_a, int row_b, int tid) {
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  hopper::named_sync(epi_bar, 128);  // the previous slice's staged reads are done
  stage_slice<T>(o, staged, warp, g, t);
  hopper::named_sync(epi_bar, 128);
  const int valid = p.mask.Sq - r0;
  const OutputSlice slice{w.batch, w.head, r0, valid < 0 ? 0 : (valid > 64 ? 64 : valid)};
  Epilogue::template store<T::kHeadDim>(p.epilogue, slice, staged, T::kOPitch, tid);
  if (t == 0) {
    if (row_a < p.mask.Sq) Epilogue::store_lse(p.epilogue, slice, row_a - r0, lse[0]);
    if (row_b < p.mask.Sq) Epilogue::store_lse(p.epilogue, slice, row_b - r0, lse[1]);
  }
  if constexpr (Epilogue::kSignal == Signal::per_slice) {
    hopper::named_sync(epi_bar, 128);
    Epilogue::slice_done(p.epilogue, slice, tid);
  } else if constexpr (Epilogue::kSignal == Signal::by_agent) {
    hopper::named_sync(epi_bar, 128);  // every thread's stores of the slice are issued
    if (tid == 0) sync::smem_add_release(&bar.slices_done[wg], 1);
  } else if constexpr (Epilogue::kSignal == Signal::at_exit) {
    // After this warpgroup's last slice, inside the tile loop: the same code after the
    // loop made ptxas spill the D = 128 consumer (440 bytes), even when nothing there
    // needed a value from before the loop. is_last is index arithmetic only: walking the
    // schedule again to count slices per owner ran 8-24 % slower over attention alone on
    // one H200, its SASS ~1,600 instructions longer (docs/xstage-ulysses.md).
    if (p.scheduler.is_last(w, gridDim.x)) {
      hopper::named_sync(epi_bar, 128);  // every thread's stores of every slice are issued
      Epilogue::worker_done(p.epilogue, tid);
    }
  }
}

// The release agent (Signal::by_agent policies), one thread of the producer
// warpgroup. Walks the CTA's tiles in the consumers' order; whenever every consumer
// warpgroup has stored more slices than it has released (slices_done, each
// warpgroup's thread 0 adds 1 with release at CTA scope after its warpgroup barrier),
// one fence.acq_rel.sys, then tile_done for each of those tiles. The consumers' stores
// precede their barrier and the add that the acquire load here observes, so the fence
// orders them before tile_done's signal (cumulativity). No consumer waits for the
// agent: the consumers' code is one shared-memory add per slice (a ring of mbarriers,
// where a consumer could wait for a free slot, ran 10-29 % slower over attention alone
// on one H200; docs/xstage-ulysses.md).
template <class T, class Epilogue>
__device__ __forceinline__ void agent_loop(const FlashFwdParams<Epilogue>& p, PipelineBarriers<T>& bar) {
  uint32_t released = 0;
  WorkTile w = p.scheduler.initial_work(blockIdx.x, gridDim.x);
#pragma unroll 1
  while (w.valid) {
    const uint32_t done = sync::agent_wait_past<T::kConsumerWGs>(p.wait, bar.slices_done, released,
                                                                 AttentionSite::agent);
    sync::fence_acq_rel_sys();
#pragma unroll 1
    for (; released < done && w.valid; ++released, w = p.scheduler.next_work(w, gridDim.x))
      Epilogue::tile_done(p.epilogue, w, T::kBlockM, T::kConsumerWGs);
  }
}

}  // namespace xstage::attention::sm90
