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
//   static StoreTarget target(const Params&, const OutputSlice&);
//       where row r of the slice goes: base pointer and row stride (elements)
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
// (issue 6) is the same copy with a peer's base pointer from target() and a
// release-flag in slice_done(); the mainloop does not change.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

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

  __device__ __forceinline__ static StoreTarget target(const Params& p, const OutputSlice& s) {
    return {p.o + s.batch * p.stride_b + s.head * p.stride_h + static_cast<int64_t>(s.row0) * p.stride_s, p.stride_s};
  }
  __device__ __forceinline__ static void store_lse(const Params& p, const OutputSlice& s, int r, float lse) {
    if (p.lse) p.lse[s.batch * p.lse_stride_b + s.head * p.lse_stride_h + s.row0 + r] = lse;
  }
  __device__ __forceinline__ static void slice_done(const Params&, const OutputSlice&, int) {}
};

}  // namespace xstage::attention::sm90
