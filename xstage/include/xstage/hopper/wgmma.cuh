// Warpgroup MMA (wgmma, sm_90a): shared-memory matrix descriptors, the
// fence/commit/wait protocol, and a compiler fence for accumulator registers.
//
// Protocol, per warpgroup (all 128 threads execute every call):
//   fence()              before the first wgmma, and whenever registers that a
//                        wgmma reads or accumulates into were touched by ordinary code
//   mma_ss / mma_rs ...  issue (asynchronous)
//   commit()             close a group of issued wgmmas
//   wait<N>()            block until at most N committed groups are still in flight
// Accumulators of an in-flight wgmma must not be read or written;
// fence_operand() keeps the compiler from moving such accesses across the issue
// and the wait.
//
// Descriptor layouts used by this project (bf16, 128-byte swizzle, tiles written
// by TMA with CU_TENSOR_MAP_SWIZZLE_128B, tile base 1024-byte aligned):
//   K-major ("row-major" A, or B stored as N rows of K): 8 rows of 128 B form a
//     1024-byte swizzle atom; atoms along M/N are `sbo` bytes apart (1024 when
//     rows are packed). LBO is unused. A k-step of 16 elements inside the 64-wide
//     atom advances the start address by 32 B.
//   MN-major (B stored as K rows of N, read with TransB = 1): 8 K-rows of 128 B
//     (64 N-elements) form an atom; `sbo` = bytes between 8-row groups along K
//     (1024), `lbo` = bytes between 64-element column panels along N.
#pragma once

#include <cstdint>

#include "xstage/hopper/wgmma_ops.cuh"

namespace xstage::hopper::wgmma {

enum class Swizzle : uint64_t { none = 0, b128 = 1, b64 = 2, b32 = 3 };

// Shared-memory matrix descriptor: start address, leading and stride byte
// offsets (all >> 4, 14 bits each), base offset 0 (tiles are atom-aligned).
__device__ __forceinline__ uint64_t make_desc(uint32_t smem_addr, uint32_t lbo_bytes, uint32_t sbo_bytes,
                                              Swizzle swizzle = Swizzle::b128) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((smem_addr & 0x3FFFF) >> 4);
  d |= static_cast<uint64_t>((lbo_bytes >> 4) & 0x3FFF) << 16;
  d |= static_cast<uint64_t>((sbo_bytes >> 4) & 0x3FFF) << 32;
  d |= static_cast<uint64_t>(swizzle) << 62;
  return d;
}

// Advances a descriptor's start address by `bytes` (a multiple of 16).
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) { return desc + (bytes >> 4); }

__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Pins accumulator registers in place around asynchronous wgmma regions.
template <int N>
__device__ __forceinline__ void fence_operand(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_operand(uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

template <int M, int N>
__device__ __forceinline__ void fence_operand(uint32_t (&r)[M][N]) {
#pragma unroll
  for (int i = 0; i < M; ++i) fence_operand(r[i]);
}

// One K stage of a tile held in two accumulators (the MoE and fused-QKV GEMMs):
// acc0 (+)= A·B0ᵀ and acc1 (+)= A·B1ᵀ, the stage holding the boxes [A | B0 | B1] of
// 128 rows x kTileK bf16 each (K-major, 128-byte swizzle, kBoxBytes apart); this
// warpgroup multiplies A's rows [64·wg, 64·wg + 64). Issues and commits one group.
// B0 and B1 are adjacent 128-row boxes, so by default each k16 step is one
// m64n256k16 over both (B as 256 rows, 8-row groups 1024 B apart): A is read from
// shared memory once per step instead of once per box (1-3 % faster than a pair of
// m64n128k16, docs/xstage-moe.md "Decisions").
template <int kTileK, int kBoxBytes>
__device__ __forceinline__ void mma_stage_two_b(float (&acc0)[64], float (&acc1)[64], uint32_t stage_addr, int wg,
                                                bool first) {
  static_assert(kBoxBytes == 128 * 128, "B0 and B1 must be adjacent 128-row boxes of 128-byte rows");
  const uint32_t a_addr = stage_addr + wg * 64 * 128;
  const uint32_t b0 = stage_addr + kBoxBytes;
  fence_operand(acc0);
  fence_operand(acc1);
  fence();
#pragma unroll
  for (int kk = 0; kk < kTileK / 16; ++kk) {
    const uint64_t da = make_desc(a_addr + kk * 32, 0, 1024);
    const int accumulate = (first && kk == 0) ? 0 : 1;
    mma_ss_halves<256, 0>(acc0, acc1, da, make_desc(b0 + kk * 32, 0, 1024), accumulate);
  }
  commit();
}

// The same stage with one B box: acc0 (+)= A·B0ᵀ (a tile cut to one head).
template <int kTileK, int kBoxBytes>
__device__ __forceinline__ void mma_stage_one_b(float (&acc0)[64], uint32_t stage_addr, int wg, bool first) {
  const uint32_t a_addr = stage_addr + wg * 64 * 128;
  const uint32_t b0 = stage_addr + kBoxBytes;
  fence_operand(acc0);
  fence();
#pragma unroll
  for (int kk = 0; kk < kTileK / 16; ++kk) {
    const int accumulate = (first && kk == 0) ? 0 : 1;
    mma_ss<128, 0>(acc0, make_desc(a_addr + kk * 32, 0, 1024), make_desc(b0 + kk * 32, 0, 1024), accumulate);
  }
  commit();
}

}  // namespace xstage::hopper::wgmma
