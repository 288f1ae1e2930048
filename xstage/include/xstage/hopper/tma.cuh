// TMA (bulk tensor copy engine) loads, sm_90. The tensor map is built on the host
// (xstage/hopper/tensor_map.hpp) and passed to the kernel by value as a
// __grid_constant__ parameter (or inside one), so its address is a param-space
// address the copy engine can read.
//
// A load completes on an mbarrier: the issuing thread first arrives with
// expect_tx(total bytes of the box(es)), then issues the loads; waiters see the
// phase complete once every byte has landed. Out-of-bounds box elements are
// filled with zeros and still count towards the bytes.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "xstage/hopper/mbarrier.cuh"

namespace xstage::hopper {

__device__ __forceinline__ void tma_prefetch_desc(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// 4-D tiled load of one box at coordinates (c0 innermost .. c3) into `dst`.
__device__ __forceinline__ void tma_load_4d(const CUtensorMap* map, uint64_t* bar, void* dst, int c0, int c1, int c2,
                                            int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_addr(bar))
      : "memory");
}

// 2-D tiled load of one box at coordinates (c0 innermost, c1) into `dst`.
__device__ __forceinline__ void tma_load_2d(const CUtensorMap* map, uint64_t* bar, void* dst, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_addr(bar))
      : "memory");
}

// The proxy fences that order generic writes with TMA reads are sync::fence_proxy_async_*
// (sync/ptx.cuh).

}  // namespace xstage::hopper
