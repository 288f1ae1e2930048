// Mainloop of the fused MoE kernel: the producer warp's tickets, dependency waits and
// TMA loads, and a consumer warpgroup's GEMM of one work item.
//
// Producer (one warp; lane 0 unless said): takes the schedule's items by ticket; the
// warp looks up an L2 item's row destinations and per-owner counts (the consumers'
// epilogue then loads nothing from global memory); waits for the item's dependency
// (L1: its expert's dispatch rows; L2: both halves of every L1 tile of its row block),
// then fence.proxy.async.global (generic writes -> TMA reads), hands the item to the
// consumers through an item slot and streams its K steps into the kStages-deep ring
// (A 128x64 + B0 128x64 + B1 128x64, 128-byte swizzle).
// Dependencies always precede an item in the order and all CTAs are resident, so
// these waits end. Consumer (one warpgroup, 64 rows): per stage 4 wgmma m64n256k16
// (SS) over B0|B1 into two 64x128 fp32 accumulators; one group stays in flight, so
// stage s is released once the group of s+1 is issued and s is done.
#pragma once

#include <cstdint>

#include "sm90_moe_fused_traits.cuh"
#include "sm90_moe_profile.cuh"
#include "xstage/hopper/mbarrier.cuh"
#include "xstage/hopper/tma.cuh"
#include "xstage/hopper/wgmma.cuh"
#include "xstage/sync/ring.cuh"
#include "xstage/sync/wait.cuh"

namespace xstage::moe::device {

// An L2 item's row destinations, by the producer warp before it hands the item over:
// lane l holds rows l + 32 i of the tile (i < 4; rows 0-63 are consumer warpgroup 0's),
// dest[i] = slot * kMaxRanks + owner or kNoDest past the expert's rows; and per
// warpgroup the rows that go to each owner (ItemSlot::counts, by ballot).
constexpr int kDestsPerLane = kTileM / 32;
__device__ __forceinline__ void load_row_dests(const FusedArgs& a, ItemSlot& s, int lane, int (&dest)[kDestsPerLane]) {
#pragma unroll
  for (int i = 0; i < kDestsPerLane; ++i) {
    const int row = s.ld.a_row + lane + 32 * i;
    dest[i] = row < s.rows_end ? a.recv_src_slot[row] * kMaxRanks + a.recv_src_rank[row] : kNoDest;
  }
#pragma unroll
  for (int w = 0; w < Shape::kConsumerWGs; ++w) {
    s.counts[w] = 0;
#pragma unroll
    for (int o = 0; o < kMaxRanks; ++o) {
      unsigned n = 0;
#pragma unroll
      for (int i = w * kDestsPerLane / 2; i < (w + 1) * kDestsPerLane / 2; ++i)
        n += __popc(__ballot_sync(0xffffffffu, dest[i] != kNoDest && dest[i] % kMaxRanks == o));
      s.counts[w] |= static_cast<unsigned long long>(n) << (8 * o);
    }
  }
}

// The item's K steps into the kStages-deep ring (the producer warp's lane 0).
template <class Prof>
__device__ __forceinline__ void issue_loads(const FusedArgs& a, uint8_t* smem, Barriers& bar, const ItemSlot& s,
                                            sync::RingPos& stage, Prof& prof) {
  const CUtensorMap* amap = s.it.kind == TileKind::l1 ? &a.map_recv : &a.map_h;
  const CUtensorMap* bmap = s.it.kind == TileKind::l1 ? &a.map_w1 : &a.map_w2;
#pragma unroll 1
  for (int k = 0; k < s.ld.k_steps; ++k) {
    const auto te = Prof::now();
    sync::wait_phase(a.wait, &bar.empty[stage.index], stage.phase ^ 1, MoeSite::stage_empty, stage.index);
    prof.end(ProducerPhase::ring, te);
    uint8_t* dst = smem + Shape::kOffStages + stage.index * Shape::kStageBytes;
    uint64_t* full = &bar.full[stage.index];
    hopper::mbar_arrive_expect_tx(full, Shape::kStageBytes);
    hopper::tma_load_2d(amap, full, dst, k * kTileK, s.ld.a_row);
    hopper::tma_load_2d(bmap, full, dst + Shape::kBoxBytes, k * kTileK, s.ld.b0_row);
    hopper::tma_load_2d(bmap, full, dst + 2 * Shape::kBoxBytes, k * kTileK, s.ld.b1_row);
    stage.advance<Shape::kStages>();
  }
}

// The producer warp: lane 0 takes tickets, waits for an item's dependency (L1: its
// expert's dispatch rows; L2: both halves of every L1 tile of its row block), hands the
// item over and issues its TMA loads; the other lanes help look up an L2 item's rows.
template <class Prof>
__device__ void producer(const FusedArgs& a, uint8_t* smem, Barriers& bar, Prof& prof, int lane) {
  using P = ProducerPhase;
  if (lane == 0) {
    hopper::tma_prefetch_desc(&a.map_recv);
    hopper::tma_prefetch_desc(&a.map_h);
    hopper::tma_prefetch_desc(&a.map_w1);
    hopper::tma_prefetch_desc(&a.map_w2);
  }
  const auto* flags = static_cast<const unsigned*>(local_window_at(a, 0));
  const unsigned l1_expect = static_cast<unsigned>(a.l1_n_blocks * Shape::kConsumerWGs);
  const int n_items = *a.n_items;  // written before the launch (upload or the GPU planner)
  sync::RingPos stage, slot;
#pragma unroll 1
  while (true) {
    const int t = __shfl_sync(0xffffffffu, lane == 0 ? static_cast<int>(atomicAdd(a.ticket, 1u)) : 0, 0);
    ItemSlot s{{TileKind::l1, -1, 0, 0}, {}, 0, {}};
    int dest[kDestsPerLane];
    if (t < n_items) {
      s.it = a.items[t];
      s.ld = tile_loads(s.it, a.expert_offset[s.it.expert], a.hidden, a.inter);
      s.rows_end = a.expert_offset[s.it.expert + 1];
      if (s.it.kind == TileKind::l2) load_row_dests(a, s, lane, dest);
      if (lane == 0) {
        const auto tw = Prof::now();
        if (s.it.kind == TileKind::l1)
          sync::wait_geq_acquire(a.wait, flags + s.it.expert, a.dispatch_expect[s.it.expert], MoeSite::dispatch_rows,
                                 s.it.expert, sync::kPeerBudgets);
        else
          sync::wait_geq_acquire(a.wait, a.l1_done + s.it.expert * a.max_m_blocks + s.it.m_block, l1_expect,
                                 MoeSite::l1_row_block, s.it.expert * a.max_m_blocks + s.it.m_block,
                                 sync::kCtaBudgets);
        prof.end(P::dependency, tw);
        sync::fence_proxy_async_global();  // generic writes of recv / H before the TMA reads
      }
    }
    // Hand-over: the slot is free once both warpgroups finished its previous item's
    // epilogue. Every lane waits (acquire) before it writes the slot's dests.
    const auto tr = Prof::now();
    sync::wait_phase(a.wait, &bar.item_empty[slot.index], slot.phase ^ 1, MoeSite::item_empty, slot.index);
    prof.end(P::ring, tr);
    if (lane == 0) bar.item[slot.index] = s;
    if (s.it.expert >= 0 && s.it.kind == TileKind::l2) {
#pragma unroll
      for (int i = 0; i < kDestsPerLane; ++i) bar.dest[slot.index][lane + 32 * i] = dest[i];
    }
    hopper::mbar_arrive(&bar.item_full[slot.index]);  // every lane, release.cta: the slot and its dests
    slot.advance<Shape::kItemSlots>();
    if (s.it.expert < 0) break;
    if (lane == 0) issue_loads(a, smem, bar, s, stage, prof);
  }
}

// One item's GEMM (k_steps stages from `stage` on) for consumer warpgroup wg; every
// stage it read is released on return. A warpgroup whose 64 rows all lie past the
// expert's last row (the padding of an expert's last row block) only passes the
// stages on: its wgmmas would be wasted tensor-core time and power.
template <class Prof>
__device__ __forceinline__ void consumer_mainloop(const FusedArgs& a, Barriers& bar, uint32_t stages_addr,
                                                  sync::RingPos& stage, int k_steps, int wg, int lane, bool has_rows,
                                                  float (&acc0)[64], float (&acc1)[64], Prof& prof) {
  if (!has_rows) {
#pragma unroll 1
    for (int k = 0; k < k_steps; ++k) {
      const auto ts = Prof::now();
      sync::wait_phase(a.wait, &bar.full[stage.index], stage.phase, MoeSite::stage_full, stage.index);
      prof.end(ConsumerPhase::stage, ts);
      hopper::mbar_warp_arrive(&bar.empty[stage.index], lane);
      stage.advance<Shape::kStages>();
    }
    return;
  }
  sync::RingPos prev;
#pragma unroll 1
  for (int k = 0; k < k_steps; ++k) {
    const auto ts = Prof::now();
    sync::wait_phase(a.wait, &bar.full[stage.index], stage.phase, MoeSite::stage_full, stage.index);
    prof.end(ConsumerPhase::stage, ts);
    hopper::wgmma::mma_stage_two_b<kTileK, Shape::kBoxBytes>(acc0, acc1, stages_addr + stage.index * Shape::kStageBytes,
                                                            wg, k == 0);
    hopper::wgmma::wait<1>();
    hopper::wgmma::fence_operand(acc0);
    hopper::wgmma::fence_operand(acc1);
    if (k > 0) hopper::mbar_warp_arrive(&bar.empty[prev.index], lane);
    prev = stage;
    stage.advance<Shape::kStages>();
  }
  hopper::wgmma::wait<0>();
  hopper::wgmma::fence_operand(acc0);
  hopper::wgmma::fence_operand(acc1);
  hopper::mbar_warp_arrive(&bar.empty[prev.index], lane);
}

}  // namespace xstage::moe::device
