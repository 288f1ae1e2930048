// Fused expert-parallel MoE forward: one persistent kernel per rank, sm_90a.
//
// Protocol across CTAs and ranks (every wait has a budget, sync/wait.cuh):
//   0. start   block 0: LSA barrier over all ranks (everyone has finished the
//              previous launch, so recv/comb may be overwritten), then releases
//              `gate` = epoch; the other blocks acquire it.
//   1. dispatch the block's (token, slot) rows go to the destination's recv (remote
//              st.global.v4 through LSA pointers) in passes over local expert ids
//              (moe::DispatchPlan): the first pass by every warp before the roles
//              start, the others by the producer warpgroup's warps 1-2 while the
//              tiles run. Per warp and 32 pairs, lane 0: fence.acq_rel.sys, then
//              red.relaxed.sys.add dispatch_cnt[expert] on the destination, one per
//              row (release pattern: fence + relaxed atomics). (sm90_moe_dispatch.cuh)
//   2. tiles   the producer warp takes items of the schedule's order by ticket and
//              waits for their dependencies (sm90_moe_fused_mainloop.cuh):
//              L1 (e, m, n): acquire dispatch_cnt[e] >= dispatch_expect[e].
//              L2 (e, m, n): acquire l1_done[e, m] >= l1_n_blocks * 2 (two halves
//                 per L1 tile, one per consumer warpgroup).
//              Consumers: L1 = gate/up GEMM over hidden, SwiGLU, bf16 H rows
//              (local), fence.proxy.async.global, release l1_done[e, m] += 1.
//              L2 = GEMM over I, REMOTE STORE of each output row to its owner's
//              comb[token*k+slot] (store_rows_to_owners: 16 B stores through LSA
//              pointers; the producer warp looked up each row's owner and slot), then
//              a release of one red.add per owner of its rows' count.
//              Releases go through the release agent, so no consumer waits for its
//              stores to drain (sm90_moe_fused_epilogue.cuh).
//   3. combine consumers acquire combine_cnt >= combine_expect; out[t] =
//              sum_k w[t,k] * comb[t,k] (fp32, slot order, one bf16 rounding).
//              (sm90_moe_combine.cuh)
//   Host-link combine drain (FusedArgs::drain_stage): L2 rows stay local in (source,
//   expert) order, l2_done[e] counts each expert's tiles, the owners' side streams copy
//   each source's ranges back and raise its drain flags, which the combine acquires instead.
//
// Inside a CTA (warp specialisation; FusedKernelShape in xstage/moe/kernel_plan.hpp):
//   warpgroup 0  producer: setmaxnreg 56; warp 0 takes tickets (lane 0), looks up
//                an L2 item's row destinations (all lanes), waits for the item's
//                dependency, writes it to an item slot, then issues the item's TMA
//                loads into a kStages-deep ring of 48 KiB stages;
//                warps 1-2 run the dispatch passes after the first, warp 3's lane 0
//                is the release agent.
//   warpgroups 1-2  consumers: setmaxnreg 224; each owns 64 rows of the 128-row
//                tile and two 64x128 fp32 accumulators (L1: gate, up; L2: the two
//                128-column halves of the 256-wide tile): mainloop, then epilogue.
// Barriers (sm90_moe_fused_traits.cuh): item_full / item_empty (producer ->
// consumers), full / empty (the TMA ring), rel_full / rel_empty (consumers -> agent).
// Timeouts: each wait records site, rank, block, thread, index, expected/seen in the
// launcher's host-mapped report (FusedArgs::wait), then faults; no printf anywhere (a
// call in the kernel would make ptxas serialise the wgmmas). Budgets (sync/wait.cuh):
// waits on other ranks only one, waits that this rank's CTAs can hold up (the
// combine's among them) two, the mbarrier waits inside a CTA three, the release agent
// six, so that the first wait to report is the one on the rank or CTA that stalled.
// Profiling is a policy (sm90_moe_profile.cuh): NoProfile or CycleProfile.
#pragma once

#include <cuda.h>

#include "sm90_moe_combine.cuh"
#include "sm90_moe_dispatch.cuh"
#include "sm90_moe_fused_epilogue.cuh"
#include "sm90_moe_fused_mainloop.cuh"
#include "sm90_moe_fused_traits.cuh"
#include "sm90_moe_profile.cuh"
#include "xstage/comm/device.cuh"
#include "xstage/hopper/mbarrier.cuh"
#include "xstage/sync/ptx.cuh"
#include "xstage/sync/ring.cuh"
#include "xstage/sync/wait.cuh"

namespace xstage::moe::device {

// ---- consumer: one warpgroup over the items -----------------------------------------
// wg: 0..1 among the consumers, tid: 0..127 in the warpgroup.
template <class Prof>
__device__ void consumer(const FusedArgs& a, uint8_t* smem, Barriers& bar, Prof& prof, int wg, int tid) {
  using C = ConsumerPhase;
  const int warp = tid / 32, lane = tid % 32;
  const uint32_t stages_addr = hopper::smem_addr(smem + Shape::kOffStages);
  std::uint16_t* staged =
      reinterpret_cast<std::uint16_t*>(smem + Shape::kOffStaging + wg * Shape::kStagingBytesPerWG);
  const int epi_bar = kEpilogueBar0 + wg;
  sync::RingPos stage, slot, rel;  // rel: thread 0 only
  float acc0[64], acc1[64];
  auto tp = Prof::now();
#pragma unroll 1
  while (true) {
    // Scheduler: the producer's next item (the slot stays ours until its epilogue is done).
    sync::wait_phase(a.wait, &bar.item_full[slot.index], slot.phase, MoeSite::item_full, slot.index);
    tp = prof.end(C::item, tp);
    const ItemSlot& s = bar.item[slot.index];
    const WorkItem it = s.it;
    if (it.expert < 0) {
      hopper::mbar_arrive(&bar.item_empty[slot.index]);
      if (tid == 0) post_release(a, bar, wg, rel, {kReleaseStop, 0, 0});
      break;
    }
    // This warpgroup's rows [row0, row0 + rows) of the tile.
    const int row0 = s.ld.a_row + wg * 64;
    const int rows = max(0, min(64, s.rows_end - row0));
    consumer_mainloop(a, bar, stages_addr, stage, s.ld.k_steps, wg, lane, rows > 0, acc0, acc1, prof);
    tp = prof.end(C::mainloop, tp);

    // Epilogue (none without rows), then the tile's release after the warpgroup barrier
    // (always: l1_done counts both halves of every L1 tile).
    if (it.kind == TileKind::l1) {
      if (rows > 0) store_h_rows(a, it, acc0, acc1, staged, row0, rows, warp, lane);
      hopper::named_sync(epi_bar, 128);
      if (tid == 0) post_release(a, bar, wg, rel, {kReleaseL1, it.expert * a.max_m_blocks + it.m_block, 0});
    } else {
      if (rows > 0)
        store_rows_to_owners(a, bar, it, acc0, acc1, bar.dest[slot.index] + wg * 64, staged, row0, warp, lane);
      hopper::named_sync(epi_bar, 128);
      if (tid == 0) post_release(a, bar, wg, rel, {kReleaseL2, it.expert, s.counts[wg]});
    }
    hopper::mbar_arrive(&bar.item_empty[slot.index]);  // every thread: its last read of the slot
    slot.advance<Shape::kItemSlots>();
    tp = prof.end(C::epilogue, tp);
    prof.add(C::items, 1);
  }
}

// 0. start: every rank has finished the previous launch (block 0's LSA barrier; one
// rank: stream order; a OneGpuGroup: its caller synchronises the ranks), then the gate.
__device__ __forceinline__ void start_gate(const FusedArgs& a) {
  if (blockIdx.x == 0) {
    if (a.ranks == 1 || a.plain[0] != nullptr) __syncthreads();
    else comm::lsa_barrier_sync(a.dev, 0, a.wait, MoeSite::lsa_barrier, sync::kPeerBudgets);
    if (threadIdx.x == 0) sync::st_release_sys(a.gate, a.epoch);
  }
  if (threadIdx.x == 0) sync::wait_geq_acquire(a.wait, a.gate, a.epoch, MoeSite::start_gate, -1, sync::kCtaBudgets);
}

// ---- the kernel ------------------------------------------------------------------------
template <class Prof>
__global__ void __launch_bounds__(Shape::kThreads, 1) moe_fused_kernel(const __grid_constant__ FusedArgs a) {
  const auto t_entry = Prof::now();
  // Shared memory: the stage ring, the consumers' staging, the barriers (traits).
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  auto& bar = *reinterpret_cast<Barriers*>(smem + Shape::kOffBar);
  // Barriers.
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < Shape::kStages; ++s) {
      hopper::mbar_init(&bar.full[s], 1);
      hopper::mbar_init(&bar.empty[s], Shape::kConsumerWarps);
    }
#pragma unroll
    for (int s = 0; s < Shape::kItemSlots; ++s) {
      hopper::mbar_init(&bar.item_full[s], 32);                          // the producer warp's lanes
      hopper::mbar_init(&bar.item_empty[s], 32 * Shape::kConsumerWarps);  // every consumer thread
    }
#pragma unroll
    for (int w = 0; w < Shape::kConsumerWGs; ++w)
#pragma unroll
      for (int s = 0; s < Shape::kReleaseSlots; ++s) {
        hopper::mbar_init(&bar.rel_full[w][s], 1);   // the warpgroup's thread 0
        hopper::mbar_init(&bar.rel_empty[w][s], 1);  // the agent
      }
#pragma unroll 1
    for (int r = 0; r < a.ranks; ++r) bar.comb_base[r] = comb_rows(a, r);
    Prof::clear(bar);
    hopper::mbar_init_fence();
  }
  start_gate(a);
  __syncthreads();
  // Profile: one role per warpgroup, its thread 0 adds. Each role's total = its end
  // stamp - the entry stamp: the entry is subtracted now, so that no register holds it.
  const int warp = static_cast<int>(threadIdx.x) / 32, wg = warp / 4;
  Prof prof(bar.prof[wg], threadIdx.x % 128 == 0);
  prof.add(wg == 0 ? static_cast<int>(ProducerPhase::total) : static_cast<int>(ConsumerPhase::total),
           0ull - static_cast<unsigned long long>(t_entry));
  auto tp = wg == 0 ? prof.end(ProducerPhase::start, t_entry) : t_entry;

  // 1. dispatch, first pass: every warp (the experts the schedule's first tiles need).
  dispatch_pass<4>(a, 0, a.dispatch_first, warp, Shape::kThreads / 32);
  if (wg == 0) tp = prof.end(ProducerPhase::dispatch_first, tp);

  // 2. tiles (roles), 3. combine (consumers).
  if (wg == 0) {
    hopper::regs_dealloc<Shape::kProducerRegs>();
    if (warp == 0) {  // producer: tickets, dependencies, row destinations, TMA loads
      producer(a, smem, bar, prof, threadIdx.x % 32);
      prof.end(ProducerPhase::total, 0);
      prof.flush(a, 0);
    } else if (warp == Shape::kReleaseWarp) {  // epilogue: the release agent
      if (threadIdx.x % 32 == 0) release_agent(a, bar);
    } else if (warp > 0) {  // 1. the other dispatch passes by warps 1-2, while the tiles run
#pragma unroll 1
      for (int lo = a.dispatch_first; lo < a.experts_local; lo += a.dispatch_step)
        dispatch_pass<2>(a, lo, min(lo + a.dispatch_step, a.experts_local), warp - 1, 2);
    }
  } else {
    hopper::regs_alloc<Shape::kConsumerRegs>();
    consumer(a, smem, bar, prof, wg - 1, threadIdx.x - 128 * wg);  // consumer: mainloop, epilogue, remote store
    combine(a, threadIdx.x - 128, prof);
  }
}

}  // namespace xstage::moe::device
