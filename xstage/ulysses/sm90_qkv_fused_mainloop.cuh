// Mainloop of the fused QKV kernel: the producer's TMA loads of a CTA's entries and a
// consumer warpgroup's GEMM of one entry (the shape of the fused MoE kernel's GEMM).
//
// Producer (one thread): CTA b takes entries order[b], order[b + grid], ...; each K
// step of an entry fills one stage of the 4-deep ring (empty -> full, expect_tx +
// TMA bytes): h 128 x 64, W rows of head 2c, W rows of head 2c + 1 (zero-filled past
// 3H), 128-byte swizzle; a one-head entry (split tail, qkv_split_tail) loads h and
// that head's rows. Consumer (one warpgroup, 64 rows): per stage 4 wgmma m64n256k16
// over both heads (4 m64n128k16 into acc0 for a one-head entry), one group in
// flight, so stage s is freed once the group of s + 1 is issued and s is done.
#pragma once

#include <cstdint>

#include "sm90_qkv_fused_traits.cuh"
#include "xstage/hopper/mbarrier.cuh"
#include "xstage/hopper/tma.cuh"
#include "xstage/hopper/wgmma.cuh"
#include "xstage/sync/ring.cuh"
#include "xstage/sync/wait.cuh"
#include "xstage/ulysses/qkv_fused.hpp"

namespace xstage::ulysses::qkv_device {

__device__ void producer(const QkvArgs& a, uint8_t* smem, Barriers& bar) {
  hopper::tma_prefetch_desc(&a.map_h);
  hopper::tma_prefetch_desc(&a.map_w);
  const int k_steps = a.hidden / kQkvTileK;
  sync::RingPos stage;
#pragma unroll 1
  for (int i = blockIdx.x; i < a.n_entries; i += gridDim.x) {
    const int e = a.order[i], t = qkv_entry_tile(e), sel = qkv_entry_sel(e);
    const int mb = t / a.col_tiles, ct = t % a.col_tiles;
    // Box 1: head 2c (or 2c + 1 for a second-head entry); box 2: head 2c + 1, whole tiles only.
    const int head1 = sel == 2 ? 2 * ct + 1 : 2 * ct;
#pragma unroll 1
    for (int k = 0; k < k_steps; ++k) {
      sync::wait_phase(a.wait, &bar.empty[stage.index], stage.phase ^ 1, QkvSite::stage_empty, stage.index);
      uint8_t* dst = smem + stage.index * kStageBytes;
      uint64_t* full = &bar.full[stage.index];
      hopper::mbar_arrive_expect_tx(full, sel == 0 ? kStageBytes : 2 * kBoxBytes);
      hopper::tma_load_2d(&a.map_h, full, dst, k * kQkvTileK, mb * kQkvTileRows);
      hopper::tma_load_2d(&a.map_w, full, dst + kBoxBytes, k * kQkvTileK, head1 * kQkvHeadDim);
      if (sel == 0) hopper::tma_load_2d(&a.map_w, full, dst + 2 * kBoxBytes, k * kQkvTileK, (2 * ct + 1) * kQkvHeadDim);
      stage.advance<kStages>();
    }
  }
}

// One entry's GEMM for consumer warpgroup wg: acc0 (and acc1 when `both`) over all K
// steps; every stage it read is freed on return.
__device__ __forceinline__ void consumer_mainloop(const QkvArgs& a, Barriers& bar, uint32_t stages_addr,
                                                  sync::RingPos& stage, bool both, int wg, int lane,
                                                  float (&acc0)[64], float (&acc1)[64]) {
  const int k_steps = a.hidden / kQkvTileK;
  sync::RingPos prev;
#pragma unroll 1
  for (int k = 0; k < k_steps; ++k) {
    sync::wait_phase(a.wait, &bar.full[stage.index], stage.phase, QkvSite::stage_full, stage.index);
    if (both)
      hopper::wgmma::mma_stage_two_b<kQkvTileK, kBoxBytes>(acc0, acc1, stages_addr + stage.index * kStageBytes, wg,
                                                            k == 0);
    else
      hopper::wgmma::mma_stage_one_b<kQkvTileK, kBoxBytes>(acc0, stages_addr + stage.index * kStageBytes, wg, k == 0);
    hopper::wgmma::wait<1>();
    hopper::wgmma::fence_operand(acc0);
    hopper::wgmma::fence_operand(acc1);
    if (k > 0) hopper::mbar_warp_arrive(&bar.empty[prev.index], lane);
    prev = stage;
    stage.advance<kStages>();
  }
  hopper::wgmma::wait<0>();
  hopper::wgmma::fence_operand(acc0);
  hopper::wgmma::fence_operand(acc1);
  hopper::mbar_warp_arrive(&bar.empty[prev.index], lane);
}

}  // namespace xstage::ulysses::qkv_device
