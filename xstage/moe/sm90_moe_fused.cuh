// Fused expert-parallel MoE forward: one persistent kernel per rank, sm_90a.
//
// Protocol across CTAs and ranks (every wait has the WaitBudget timeout):
//   0. start   block 0: LSA barrier over all ranks (everyone has finished the
//              previous launch, so recv/comb may be overwritten), then releases
//              `gate` = epoch; the other blocks acquire it.
//   1. dispatch the block's (token, slot) rows go to the destination's recv (remote
//              st.global.v4 through LSA pointers) in passes over local expert ids
//              (moe::DispatchPlan): the first pass by every warp before the roles
//              start, the others by the producer warpgroup's warps 1-3 while the
//              tiles run. Per warp and 32 pairs, lane 0: fence.acq_rel.sys, then
//              red.relaxed.sys.add dispatch_cnt[expert] on the destination, one per
//              row (release pattern: fence + relaxed atomics).
//   2. tiles   the producer thread takes items of the schedule's order by ticket.
//              Dependencies always precede an item in the order and all blocks are
//              resident, so its waits always end:
//              L1 (e, m, n): acquire dispatch_cnt[e] >= dispatch_expect[e].
//              L2 (e, m, n): acquire l1_done[e, m] >= l1_n_blocks * 2 (two halves
//                 per L1 tile, one per consumer warpgroup).
//              then fence.proxy.async.global (generic writes -> TMA reads), hands
//              the item to the consumers and streams its K steps by TMA.
//              Consumers: L1 = gate/up GEMM over hidden, SwiGLU, bf16 H rows
//              (local), fence.proxy.async.global, release l1_done[e, m] += 1.
//              L2 = GEMM over I, REMOTE STORE of each output row to its owner's
//              comb[token*k+slot] (16 B stores through LSA pointers), then a
//              release of one red.add per owner of its rows' count.
//              Release (ReleaseMode::by_agent): after a warpgroup barrier, thread 0
//              queues the tile's release in shared memory (mbarrier rel_full,
//              release.cta) and the warpgroup starts its next tile; lane 0 of the
//              producer warpgroup's warp 3 (the agent) takes it (acquire.cta), runs
//              fence.acq_rel.sys, which waits for the tile's stores to drain
//              (cumulative through the two CTA-scope synchronisations), and the
//              red.adds. by_consumer: thread 0 fences and adds itself.
//   3. combine consumers acquire combine_cnt >= combine_expect; out[t] =
//              sum_k w[t,k] * comb[t,k] (fp32, slot order, one bf16 rounding).
//
// Inside a CTA (warp specialisation; FusedKernelShape in xstage/moe.hpp):
//   warpgroup 0  producer: setmaxnreg 40; thread 0 takes tickets, waits for the
//                item's dependency, writes it to an item slot, then issues the
//                item's TMA loads into a kStages-deep ring of 48 KiB stages
//                (A 128x64 + B0 128x64 + B1 128x64, 128-byte swizzle); warps 1-2
//                run the dispatch passes after the first, warp 3's lane 0 is the
//                release agent (by_consumer: warps 1-3 dispatch, no agent).
//   warpgroups 1-2  consumers: setmaxnreg 232; each owns 64 rows of the 128-row
//                tile and two 64x128 fp32 accumulators (L1: gate, up; L2: the two
//                128-column halves of the 256-wide tile). Per stage 4 wgmma
//                m64n256k16 (SS) over B0|B1; one group stays in flight, so stage s is
//                released once the group of s+1 is issued and s is done.
//   epilogue     per warpgroup, in 64-column chunks staged in shared memory
//                (144-byte rows: conflict-free), then 16 B row stores: local H
//                (L1) or the owners' comb rows (L2). Rows past the expert's
//                count were loaded (neighbouring rows or TMA zero fill) but are
//                never stored: each output row depends on its own A row only.
// Barriers: item_full[slot] (producer arrive) / item_empty[slot] (8 consumer
// warps), full[stage] (expect_tx + TMA bytes) / empty[stage] (8 consumer warps),
// rel_full[wg][slot] (the warpgroup's thread 0) / rel_empty[wg][slot] (the agent).
// Timeouts: each wait records site, rank, block, thread, index, expected/seen in
// the host-mapped FusedWaitReport, then traps; no printf anywhere (a call in the
// kernel would make ptxas serialise the wgmmas). Waits on other ranks only have one
// budget, waits that this rank's CTAs can hold up (the combine's among them) two, the mbarrier waits inside a CTA three and the
// release agent six (kPeerBudgets ...), so that the first wait to report is the one on
// the rank or CTA that stalled, not a wait it holds up.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>

#include "sm90_moe_fused.hpp"
#include "xstage/comm_device.cuh"
#include "xstage/hopper/mbarrier.cuh"
#include "xstage/hopper/tma.cuh"
#include "xstage/hopper/wgmma.cuh"

namespace xstage::moe::device {

using Shape = FusedKernelShape;

// A finished tile's release, from a consumer warpgroup's thread 0 to the agent.
enum ReleaseKind : int { kReleaseStop = -1, kReleaseL1 = 0, kReleaseL2 = 1 };
struct ReleaseReq {
  int kind;                                  // ReleaseKind
  int index;                                 // L1: l1_done index (expert * max_m_blocks + m)
  unsigned long long counts;                 // L2: byte o = rows stored to owner o (<= 64)
};

struct Barriers {
  uint64_t full[Shape::kStages], empty[Shape::kStages];
  uint64_t item_full[Shape::kItemSlots], item_empty[Shape::kItemSlots];
  uint64_t rel_full[Shape::kConsumerWGs][Shape::kReleaseSlots], rel_empty[Shape::kConsumerWGs][Shape::kReleaseSlots];
  WorkItem item[Shape::kItemSlots];  // expert < 0: no more items
  ReleaseReq rel[Shape::kConsumerWGs][Shape::kReleaseSlots];
  unsigned long long prof[kProfileRoles][kProfileFields];  // profiled launches: this CTA's sums
};
static_assert(sizeof(Barriers) <= Shape::kBarBytes, "barrier area");

// Named CTA barriers (0 is __syncthreads).
constexpr int kEpilogueBar0 = 1;  // + consumer warpgroup
constexpr int kConsumersBar = 1 + Shape::kConsumerWGs;

// ---------------------------------------------------------------- small helpers

__device__ __forceinline__ void red_add_relaxed_sys(unsigned* p, unsigned v) {
  asm volatile("red.relaxed.sys.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void fence_acq_rel_sys() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }

__device__ __forceinline__ float bf2f(std::uint16_t b) { return __uint_as_float(static_cast<unsigned>(b) << 16); }
__device__ __forceinline__ std::uint16_t f2bf(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  return static_cast<uint32_t>(f2bf(lo)) | (static_cast<uint32_t>(f2bf(hi)) << 16);
}

[[noreturn]] __device__ __forceinline__ void report_and_trap(const FusedArgs& a, FusedWaitSite site, int index,
                                                          unsigned expected, unsigned seen) {
  FusedWaitReport* r = a.report;
  if (r != nullptr && atomicCAS(&r->flag, 0, 2) == 0) {  // first reporter wins
    volatile FusedWaitReport* v = r;
    v->rank = a.rank;
    v->block = static_cast<int>(blockIdx.x);
    v->thread = static_cast<int>(threadIdx.x);
    v->site = static_cast<int>(site);
    v->index = index;
    v->expected = expected;
    v->seen = seen;
    __threadfence_system();
    v->flag = 1;
    __threadfence_system();
  }
  __trap();
  __builtin_unreachable();
}

// Budgets, in units of WaitBudget::timeout_ns, by what a wait depends on. A stalled rank
// holds up waits on this rank's other CTAs, which hold up the waits inside a CTA, and a
// wait starts no earlier than the one that holds it up; so with longer budgets further
// down the chain the first wait to report is the one on the rank that stalled, not one
// it holds up (the timer's and the polls' jitter is microseconds, the budgets' gaps are
// whole budgets).
constexpr unsigned long long kPeerBudgets = 1;    // other ranks only: LSA barrier, dispatch rows
constexpr unsigned long long kCtaBudgets = 2;     // this rank's CTAs too: start gate, L1 row blocks, combine rows
constexpr unsigned long long kInCtaBudgets = 3;   // mbarriers inside the CTA
constexpr unsigned long long kAgentBudgets = 6;   // the release agent's idle wait (a consumer's wait + a tile)

// Spins until *flag >= expected (wrap-safe), acquire at system scope, for `budgets` budgets.
__device__ __forceinline__ void wait_counter(const FusedArgs& a, const unsigned* flag, unsigned expected,
                                             FusedWaitSite site, int index, unsigned long long budgets) {
  unsigned seen = comm::load_acquire_sys(flag);
  if (static_cast<int>(seen - expected) >= 0) return;
  const unsigned long long start = comm::global_ns();
#pragma unroll 1
  while (true) {
    seen = comm::load_acquire_sys(flag);
    if (static_cast<int>(seen - expected) >= 0) return;
    if (comm::global_ns() - start > budgets * a.wait.timeout_ns) report_and_trap(a, site, index, expected, seen);
  }
}

// mbarrier phase wait (inside the CTA: kInCtaBudgets).
__device__ __forceinline__ void wait_phase(const FusedArgs& a, uint64_t* bar, uint32_t parity, FusedWaitSite site,
                                           int index) {
  if (hopper::mbar_try_wait(bar, parity)) return;
  const unsigned long long start = comm::global_ns();
#pragma unroll 1
  while (!hopper::mbar_try_wait(bar, parity))
    if (comm::global_ns() - start > kInCtaBudgets * a.wait.timeout_ns) report_and_trap(a, site, index, parity, 0);
}

// Byte `off` of rank `rank`'s window (local_window_at: this rank's): a plain pointer
// when the host gave them (EP = 1, where NCCL gives a one-rank communicator no
// symmetric memory; a OneGpuGroup), else the window's LSA pointer.
__device__ __forceinline__ void* window_at(const FusedArgs& a, std::size_t off, int rank) {
  return a.plain[0] != nullptr ? a.plain[rank] + off : ncclGetLsaPointer(a.window, off, rank);
}
__device__ __forceinline__ void* local_window_at(const FusedArgs& a, std::size_t off) {
  return a.plain[0] != nullptr ? a.plain[a.rank] + off : ncclGetLocalPointer(a.window, off);
}

// The LSA barrier of comm::lsa_barrier_sync, with this kernel's printf-free wait.
// One rank: nothing to wait for (stream order already separates the launches); a
// OneGpuGroup: its caller synchronises every rank between launches.
__device__ __forceinline__ void lsa_barrier(const FusedArgs& a) {
  if (a.ranks == 1 || a.plain[0] != nullptr) {
    __syncthreads();
    return;
  }
  ncclCoopCta cta;
  ncclLsaBarrierSession<ncclCoopCta> bar(cta, a.dev, ncclTeamTagLsa{}, 0);
  bar.arrive(cta, cuda::memory_order_release);
  for (int i = threadIdx.x; i < bar.team.nRanks - 1; i += blockDim.x) {
    const int peer = i + (bar.team.rank <= i ? 1 : 0);
    wait_counter(a, bar.ucInbox(bar.team.rank, peer), bar.epoch + 1, FusedWaitSite::lsa_barrier, peer,
                 kPeerBudgets);
  }
  bar.epoch += 1;
  __syncthreads();
}

using hopper::mbar_warp_arrive;
using Ring = hopper::RingPos;

// ---------------------------------------------------------------- profiling
// With kProf (FusedArgs::profile set) the writer thread of a role adds the SM clock
// cycles of a phase to its row of Barriers::prof; without, these are empty.
template <bool kProf>
__device__ __forceinline__ long long prof_now() {
  if constexpr (kProf) return clock64();
  else return 0;
}
// Adds the cycles since `since` to field f of role `role` (writer only), returns now.
template <bool kProf, typename Field>
__device__ __forceinline__ long long prof_lap(Barriers& bar, int role, Field f, long long since, bool writer) {
  if constexpr (kProf) {
    const long long now = clock64();
    if (writer) bar.prof[role][static_cast<int>(f)] += static_cast<unsigned long long>(now - since);
    return now;
  } else {
    return 0;
  }
}
// The role's sums of this launch into FusedArgs::profile (writer only).
template <bool kProf>
__device__ __forceinline__ void prof_flush(const FusedArgs& a, Barriers& bar, int role, bool writer) {
  if constexpr (kProf) {
    if (!writer) return;
    unsigned long long* dst = a.profile + (static_cast<std::size_t>(blockIdx.x) * kProfileRoles + role) * kProfileFields;
#pragma unroll 1
    for (int f = 0; f < kProfileFields; ++f) dst[f] += bar.prof[role][f];
  }
}

// ---------------------------------------------------------------- phase 1: dispatch

// Warp `w` of `nw` copies this CTA's (token, slot) rows whose local expert id is in
// [lo, hi) to their destinations' recv and releases them. The CTA's pairs are
// i = blockIdx.x + j * gridDim.x; the warp takes j = w + nw * (32 c + lane), 32 at a
// time (one expert id per lane, a ballot of the pass's; spread over the warps, so a
// CTA with few pairs copies them side by side), copies the hits one row after
// another (16 B per lane and step, kDepth steps in flight), then: every lane's
// fence.proxy.async.global (TMA reads the rows), __syncwarp, and lane 0's
// fence.acq_rel.sys before one red.relaxed.sys.add per row on the destination's
// counter of the row's expert (the release pattern of the tiles' counters).
// kDepth: 4 before the roles start, 2 in the producer warpgroup (40 registers).
template <int kDepth>
__device__ void dispatch_pass(const FusedArgs& a, int lo, int hi, int w, int nw) {
  const int pairs = a.tokens * a.topk, epr = a.experts_local, lane = threadIdx.x % 32, vec = a.hidden / 8;
  const int b = static_cast<int>(blockIdx.x), grid = static_cast<int>(gridDim.x);
  const int mine = b < pairs ? (pairs - 1 - b) / grid + 1 : 0;  // this CTA's pairs
  auto pair_of = [&](int c, int l) { return b + (w + nw * (32 * c + l)) * grid; };
#pragma unroll 1
  for (int c = 0; w + nw * 32 * c < mine; ++c) {
    const int j = w + nw * (32 * c + lane);
    const int le = j < mine ? a.expert[b + j * grid] % epr : -1;
    const unsigned hit = __ballot_sync(0xffffffffu, le >= lo && le < hi);
    if (hit == 0) continue;
#pragma unroll 1
    for (unsigned todo = hit; todo != 0; todo &= todo - 1) {
      const int i = pair_of(c, __ffs(static_cast<int>(todo)) - 1);
      auto* dst = reinterpret_cast<uint4*>(static_cast<std::uint16_t*>(window_at(a, a.recv_off, a.send_rank[i])) +
                                           static_cast<std::size_t>(a.send_row[i]) * a.hidden);
      const auto* src = reinterpret_cast<const uint4*>(a.x + static_cast<std::size_t>(i / a.topk) * a.hidden);
#pragma unroll 1
      for (int v = lane; v < vec; v += 32 * kDepth) {
        uint4 r[kDepth];
#pragma unroll
        for (int d = 0; d < kDepth; ++d)
          if (v + 32 * d < vec) r[d] = src[v + 32 * d];
#pragma unroll
        for (int d = 0; d < kDepth; ++d)
          if (v + 32 * d < vec) dst[v + 32 * d] = r[d];
      }
    }
    hopper::fence_proxy_async_global();  // the rows are read by TMA on the destination
    __syncwarp();
    if (lane == 0) {
      fence_acq_rel_sys();
#pragma unroll 1
      for (unsigned todo = hit; todo != 0; todo &= todo - 1) {
        const int i = pair_of(c, __ffs(static_cast<int>(todo)) - 1);
        red_add_relaxed_sys(static_cast<unsigned*>(window_at(a, 0, a.send_rank[i])) + a.expert[i] % epr, 1u);
      }
    }
    __syncwarp();
  }
}

// DispatchMode::by_block, for A/B runs: the whole CTA copies one row at a time (its
// pairs i = blockIdx.x + j * gridDim.x), then __syncthreads and thread 0 releases
// every row (fence.acq_rel.sys, one red.add per row).
__device__ void dispatch_by_block(const FusedArgs& a) {
  const int pairs = a.tokens * a.topk, vec = a.hidden / 8, epr = a.experts_local;
  for (int i = blockIdx.x; i < pairs; i += gridDim.x) {
    auto* dst = static_cast<std::uint16_t*>(window_at(a, a.recv_off, a.send_rank[i])) +
                static_cast<std::size_t>(a.send_row[i]) * a.hidden;
    const auto* src = reinterpret_cast<const uint4*>(a.x + static_cast<std::size_t>(i / a.topk) * a.hidden);
    for (int v = threadIdx.x; v < vec; v += blockDim.x) reinterpret_cast<uint4*>(dst)[v] = src[v];
  }
  hopper::fence_proxy_async_global();
  __syncthreads();
  if (threadIdx.x == 0) {
    fence_acq_rel_sys();
    for (int i = blockIdx.x; i < pairs; i += gridDim.x)
      red_add_relaxed_sys(static_cast<unsigned*>(window_at(a, 0, a.send_rank[i])) + a.expert[i] % epr, 1u);
  }
}

// ---------------------------------------------------------------- phase 2: producer

template <bool kProf>
__device__ void producer(const FusedArgs& a, uint8_t* smem, Barriers& bar) {
  using P = ProducerPhase;
  hopper::tma_prefetch_desc(&a.map_recv);
  hopper::tma_prefetch_desc(&a.map_h);
  hopper::tma_prefetch_desc(&a.map_w1);
  hopper::tma_prefetch_desc(&a.map_w2);
  const auto* flags = static_cast<const unsigned*>(local_window_at(a, 0));
  const unsigned l1_expect = static_cast<unsigned>(a.l1_n_blocks * Shape::kConsumerWGs);
  const int n_items = *a.n_items;  // written before the launch (upload or the GPU planner)
  Ring stage, slot;
#pragma unroll 1
  while (true) {
    const int t = static_cast<int>(atomicAdd(a.ticket, 1u));
    WorkItem it{TileKind::l1, -1, 0, 0};
    if (t < n_items) {
      it = a.items[t];
      const long long tw = prof_now<kProf>();
      if (it.kind == TileKind::l1)
        wait_counter(a, flags + it.expert, a.dispatch_expect[it.expert], FusedWaitSite::dispatch_rows, it.expert,
                     kPeerBudgets);
      else
        wait_counter(a, a.l1_done + it.expert * a.max_m_blocks + it.m_block, l1_expect, FusedWaitSite::l1_row_block,
                     it.expert * a.max_m_blocks + it.m_block, kCtaBudgets);
      prof_lap<kProf>(bar, 0, P::dependency, tw, true);
      hopper::fence_proxy_async_global();  // generic writes of recv / H before the TMA reads
    }
    const long long tr = prof_now<kProf>();
    wait_phase(a, &bar.item_empty[slot.index], slot.phase ^ 1, FusedWaitSite::item_empty, slot.index);
    prof_lap<kProf>(bar, 0, P::ring, tr, true);
    bar.item[slot.index] = it;
    hopper::mbar_arrive(&bar.item_full[slot.index]);
    slot.advance<Shape::kItemSlots>();
    if (it.expert < 0) break;

    const TileLoads ld = tile_loads(it, a.expert_offset[it.expert], a.hidden, a.inter);
    const CUtensorMap* amap = it.kind == TileKind::l1 ? &a.map_recv : &a.map_h;
    const CUtensorMap* bmap = it.kind == TileKind::l1 ? &a.map_w1 : &a.map_w2;
#pragma unroll 1
    for (int k = 0; k < ld.k_steps; ++k) {
      const long long te = prof_now<kProf>();
      wait_phase(a, &bar.empty[stage.index], stage.phase ^ 1, FusedWaitSite::stage_empty, stage.index);
      prof_lap<kProf>(bar, 0, P::ring, te, true);
      uint8_t* dst = smem + Shape::kOffStages + stage.index * Shape::kStageBytes;
      uint64_t* full = &bar.full[stage.index];
      hopper::mbar_arrive_expect_tx(full, Shape::kStageBytes);
      hopper::tma_load_2d(amap, full, dst, k * kTileK, ld.a_row);
      hopper::tma_load_2d(bmap, full, dst + Shape::kBoxBytes, k * kTileK, ld.b0_row);
      hopper::tma_load_2d(bmap, full, dst + 2 * Shape::kBoxBytes, k * kTileK, ld.b1_row);
      stage.advance<Shape::kStages>();
    }
  }
}

// ---------------------------------------------------------------- phase 2: consumers

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
        v[e] = gv / (1.0f + __expf(-gv)) * acc1[4 * j + e];
      } else {
        v[e] = c < 2 ? acc0[4 * j + e] : acc1[4 * j + e];
      }
    }
    const int col = 8 * jj + 2 * t;
    *reinterpret_cast<uint32_t*>(staged + (warp * 16 + g) * Shape::kStagePitch + col) = pack_bf16x2(v[0], v[1]);
    *reinterpret_cast<uint32_t*>(staged + (warp * 16 + g + 8) * Shape::kStagePitch + col) = pack_bf16x2(v[2], v[3]);
  }
}

// An L2 tile's release (after the fence): adds byte o of `counts` (the tile's rows stored
// to owner o) to owner o's combine counter.
__device__ __forceinline__ void add_combine_counts(const FusedArgs& a, unsigned long long counts) {
#pragma unroll 1
  for (int o = 0; o < a.ranks; ++o) {
    const unsigned n = static_cast<unsigned>(counts >> (8 * o)) & 0xffu;
    if (n != 0) red_add_relaxed_sys(static_cast<unsigned*>(window_at(a, 0, o)) + kMaxLocalExperts, n);
  }
}

// Queues a release for the agent (consumer warpgroup wg's thread 0; `rel` is its ring).
__device__ __forceinline__ void post_release(const FusedArgs& a, Barriers& bar, int wg, Ring& rel,
                                             const ReleaseReq& req) {
  wait_phase(a, &bar.rel_empty[wg][rel.index], rel.phase ^ 1, FusedWaitSite::release_empty,
             wg * Shape::kReleaseSlots + static_cast<int>(rel.index));
  bar.rel[wg][rel.index] = req;
  hopper::mbar_arrive(&bar.rel_full[wg][rel.index]);  // release.cta: the request and the tile's stores
  rel.advance<Shape::kReleaseSlots>();
}

template <bool kProf>
__device__ void consumer(const FusedArgs& a, uint8_t* smem, Barriers& bar, int wg, int tid) {
  using C = ConsumerPhase;
  const int role = 1 + wg;
  const bool writer = tid == 0;
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const uint32_t stages_addr = hopper::smem_addr(smem + Shape::kOffStages);
  std::uint16_t* staged =
      reinterpret_cast<std::uint16_t*>(smem + Shape::kOffStaging + wg * Shape::kStagingBytesPerWG);
  const int epi_bar = kEpilogueBar0 + wg;
  const bool agent = a.release_by_agent != 0;
  Ring stage, slot, rel;  // rel: thread 0 only
  float acc0[64], acc1[64];
  long long tp = prof_now<kProf>();
#pragma unroll 1
  while (true) {
    wait_phase(a, &bar.item_full[slot.index], slot.phase, FusedWaitSite::item_full, slot.index);
    tp = prof_lap<kProf>(bar, role, C::item, tp, writer);
    const WorkItem it = bar.item[slot.index];
    mbar_warp_arrive(&bar.item_empty[slot.index], lane);
    slot.advance<Shape::kItemSlots>();
    if (it.expert < 0) {
      if (agent && tid == 0) post_release(a, bar, wg, rel, {kReleaseStop, 0, 0});
      break;
    }
    const int first = a.expert_offset[it.expert];
    const TileLoads ld = tile_loads(it, first, a.hidden, a.inter);

    // Mainloop: one wgmma group in flight; a stage is released when its group is done.
    Ring prev;
    const long long t_main = tp;
#pragma unroll 1
    for (int k = 0; k < ld.k_steps; ++k) {
      const long long ts = prof_now<kProf>();
      wait_phase(a, &bar.full[stage.index], stage.phase, FusedWaitSite::stage_full, stage.index);
      prof_lap<kProf>(bar, role, C::stage, ts, writer);
      hopper::wgmma::mma_stage_two_b<kTileK, Shape::kBoxBytes>(acc0, acc1, stages_addr + stage.index * Shape::kStageBytes,
                                                              wg, k == 0);
      hopper::wgmma::wait<1>();
      hopper::wgmma::fence_operand(acc0);
      hopper::wgmma::fence_operand(acc1);
      if (k > 0) mbar_warp_arrive(&bar.empty[prev.index], lane);
      prev = stage;
      stage.advance<Shape::kStages>();
    }
    hopper::wgmma::wait<0>();
    hopper::wgmma::fence_operand(acc0);
    hopper::wgmma::fence_operand(acc1);
    mbar_warp_arrive(&bar.empty[prev.index], lane);
    tp = prof_lap<kProf>(bar, role, C::mainloop, t_main, writer);

    // Epilogue over this warpgroup's rows [row0, row0 + rows).
    const int row0 = ld.a_row + wg * 64;
    const int rows = max(0, min(64, a.expert_offset[it.expert + 1] - row0));
    if (it.kind == TileKind::l1) {
#pragma unroll
      for (int c = 0; c < kL1TileN / 64; ++c) {
        hopper::named_sync(epi_bar, 128);  // the previous chunk's reads of `staged` are done
        stage_chunk<true>(acc0, acc1, c, staged, warp, g, t);
        hopper::named_sync(epi_bar, 128);
        for (int i = tid; i < rows * 8; i += 128) {
          const int r = i / 8, q = i % 8;
          *reinterpret_cast<uint4*>(a.h + static_cast<std::size_t>(row0 + r) * a.inter + it.n_block * kL1TileN +
                                    c * 64 + q * 8) =
              *reinterpret_cast<const uint4*>(staged + r * Shape::kStagePitch + q * 8);
        }
      }
      hopper::fence_proxy_async_global();  // H is read by TMA (L2 tiles)
      hopper::named_sync(epi_bar, 128);
      if (tid == 0) {
        const int done = it.expert * a.max_m_blocks + it.m_block;
        if (agent) {
          post_release(a, bar, wg, rel, {kReleaseL1, done, 0});
        } else {
          fence_acq_rel_sys();
          red_add_relaxed_sys(a.l1_done + done, 1u);
        }
      }
    } else {
      // Thread tid stores rows tid/8 + 16 j (j < 4) at columns 8 (tid % 8) of every
      // 64-column chunk: each row's place in its owner's comb[token*k + slot], looked
      // up once per tile (not once per chunk).
      std::uint16_t* dst[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int r = tid / 8 + 16 * j, row = row0 + r;
        dst[j] = r < rows ? static_cast<std::uint16_t*>(window_at(a, a.comb_off, a.recv_src_rank[row])) +
                                static_cast<std::size_t>(a.recv_src_slot[row]) * a.hidden + it.n_block * kL2TileN +
                                (tid % 8) * 8
                          : nullptr;
      }
#pragma unroll
      for (int c = 0; c < kL2TileN / 64; ++c) {
        hopper::named_sync(epi_bar, 128);
        stage_chunk<false>(acc0, acc1, c, staged, warp, g, t);
        hopper::named_sync(epi_bar, 128);
        // REMOTE STORE (remote_store_combine): each row to its owner's comb[token*k + slot].
#pragma unroll
        for (int j = 0; j < 4; ++j)
          if (dst[j] != nullptr)
            *reinterpret_cast<uint4*>(dst[j] + c * 64) =
                *reinterpret_cast<const uint4*>(staged + (tid / 8 + 16 * j) * Shape::kStagePitch + (tid % 8) * 8);
      }
      hopper::named_sync(epi_bar, 128);
      if (warp == 0 && rows > 0) {
        // Rows per owner by ballot (lane l looks at rows l and l + 32), then lane 0
        // releases each owner's combine counter by its count (or queues the counts).
        const int own0 = lane < rows ? a.recv_src_rank[row0 + lane] : -1;
        const int own1 = lane + 32 < rows ? a.recv_src_rank[row0 + lane + 32] : -1;
        unsigned long long counts = 0;
#pragma unroll
        for (int o = 0; o < kMaxRanks; ++o) {
          const unsigned n = __popc(__ballot_sync(0xffffffffu, own0 == o)) + __popc(__ballot_sync(0xffffffffu, own1 == o));
          counts |= static_cast<unsigned long long>(n) << (8 * o);
        }
        if (lane == 0) {
          if (agent) {
            post_release(a, bar, wg, rel, {kReleaseL2, 0, counts});
          } else {
            fence_acq_rel_sys();
            add_combine_counts(a, counts);
          }
        }
      }
    }
    tp = prof_lap<kProf>(bar, role, C::epilogue, tp, writer);
    if constexpr (kProf) {
      if (writer) bar.prof[role][static_cast<int>(C::items)] += 1;
    }
  }
}

// ---------------------------------------------------------------- phase 2: release agent

// ReleaseMode::by_agent, one thread: takes the consumer warpgroups' queued releases
// in order (both queues in turn, each with a suspending try_wait), then one fence.acq_rel.sys for all it took and their
// red.adds. Ends when both warpgroups queued their stop. A tile's queue entry follows
// its warpgroup barrier, so the fence orders all of the warpgroup's stores of the tile
// (cumulativity) before the counts. Waits at most kAgentBudgets for the next entry (a
// consumer's own waits have kInCtaBudgets, plus one tile).
constexpr uint32_t kAgentPollNs = 200;
__device__ void release_agent(const FusedArgs& a, Barriers& bar) {
  Ring pos[Shape::kConsumerWGs];
  bool live[Shape::kConsumerWGs];
#pragma unroll
  for (int w = 0; w < Shape::kConsumerWGs; ++w) live[w] = true;
  int running = Shape::kConsumerWGs;
  unsigned long long idle_since = comm::global_ns();
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
      if (comm::global_ns() - idle_since > kAgentBudgets * a.wait.timeout_ns) {
        unsigned waiting = 0;  // bit w: warpgroup w has not stopped
#pragma unroll
        for (int w = 0; w < Shape::kConsumerWGs; ++w) waiting |= live[w] ? 1u << w : 0u;
        report_and_trap(a, FusedWaitSite::release_full, static_cast<int>(waiting), 0, 0);
      }
      continue;
    }
    if (fence) fence_acq_rel_sys();
#pragma unroll
    for (int w = 0; w < Shape::kConsumerWGs; ++w) {
      if (!got[w]) continue;
      if (req[w].kind == kReleaseStop) {
        live[w] = false;
        --running;
      } else if (req[w].kind == kReleaseL1) {
        red_add_relaxed_sys(a.l1_done + req[w].index, 1u);
      } else {
        add_combine_counts(a, req[w].counts);
      }
    }
    idle_since = comm::global_ns();
  }
}

// ---------------------------------------------------------------- phase 3: combine

// Consumer threads only (ctid 0..255): 8 columns per thread and step.
constexpr int kCombineBatch = 8;  // slots loaded before they are summed
template <bool kProf>
__device__ void combine(const FusedArgs& a, int ctid, Barriers& bar) {
  using C = ConsumerPhase;
  constexpr int kCombineThreads = 128 * Shape::kConsumerWGs;
  const int role = 1 + ctid / 128;
  const bool writer = ctid % 128 == 0;
  long long tp = prof_now<kProf>();
  if (ctid == 0) {
    const auto* cnt = static_cast<const unsigned*>(local_window_at(a, 0)) + kMaxLocalExperts;
    wait_counter(a, cnt, a.combine_expect, FusedWaitSite::combine_rows, -1, kCtaBudgets);
  }
  hopper::named_sync(kConsumersBar, kCombineThreads);
  tp = prof_lap<kProf>(bar, role, C::combine_wait, tp, writer);
  const auto* comb = static_cast<const std::uint16_t*>(local_window_at(a, a.comb_off));
  const int vec = a.hidden / 8;
  const long long total = static_cast<long long>(a.tokens) * vec;
  for (long long i = static_cast<long long>(blockIdx.x) * kCombineThreads + ctid; i < total;
       i += static_cast<long long>(gridDim.x) * kCombineThreads) {
    const int tok = static_cast<int>(i / vec), v = static_cast<int>(i % vec);
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    // Up to kCombineBatch slots' loads in flight before their sum (which stays in slot
    // order: the same rounding as one slot at a time, whose loads waited one by one).
#pragma unroll 1
    for (int j0 = 0; j0 < a.topk; j0 += kCombineBatch) {
      uint4 raw[kCombineBatch];
      float w[kCombineBatch];
#pragma unroll
      for (int jj = 0; jj < kCombineBatch; ++jj) {
        if (j0 + jj >= a.topk) break;
        const std::size_t s = static_cast<std::size_t>(tok) * a.topk + j0 + jj;
        w[jj] = a.weight[s];
        raw[jj] = *reinterpret_cast<const uint4*>(comb + s * a.hidden + v * 8);
      }
#pragma unroll
      for (int jj = 0; jj < kCombineBatch; ++jj) {
        if (j0 + jj >= a.topk) break;
        const uint32_t words[4] = {raw[jj].x, raw[jj].y, raw[jj].z, raw[jj].w};
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const std::uint16_t b = static_cast<std::uint16_t>(words[e / 2] >> (16 * (e % 2)));
          acc[e] = __fadd_rn(acc[e], __fmul_rn(w[jj], bf2f(b)));
        }
      }
    }
    uint4 o;
    o.x = pack_bf16x2(acc[0], acc[1]);
    o.y = pack_bf16x2(acc[2], acc[3]);
    o.z = pack_bf16x2(acc[4], acc[5]);
    o.w = pack_bf16x2(acc[6], acc[7]);
    *reinterpret_cast<uint4*>(a.out + static_cast<std::size_t>(tok) * a.hidden + v * 8) = o;
  }
  prof_lap<kProf>(bar, role, C::combine, tp, writer);
  prof_lap<kProf>(bar, role, C::total, 0, writer);  // the entry stamp was subtracted at the start
  prof_flush<kProf>(a, bar, role, writer);
}

// ---------------------------------------------------------------- the kernel

template <bool kProf>
__global__ void __launch_bounds__(Shape::kThreads, 1) moe_fused_kernel(const __grid_constant__ FusedArgs a) {
  const long long t_entry = prof_now<kProf>();
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  auto& bar = *reinterpret_cast<Barriers*>(smem + Shape::kOffBar);
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < Shape::kStages; ++s) {
      hopper::mbar_init(&bar.full[s], 1);
      hopper::mbar_init(&bar.empty[s], Shape::kConsumerWarps);
    }
#pragma unroll
    for (int s = 0; s < Shape::kItemSlots; ++s) {
      hopper::mbar_init(&bar.item_full[s], 1);
      hopper::mbar_init(&bar.item_empty[s], Shape::kConsumerWarps);
    }
#pragma unroll
    for (int w = 0; w < Shape::kConsumerWGs; ++w)
#pragma unroll
      for (int s = 0; s < Shape::kReleaseSlots; ++s) {
        hopper::mbar_init(&bar.rel_full[w][s], 1);   // the warpgroup's thread 0
        hopper::mbar_init(&bar.rel_empty[w][s], 1);  // the agent
      }
    if constexpr (kProf) {
#pragma unroll 1
      for (int r = 0; r < kProfileRoles; ++r)
#pragma unroll 1
        for (int f = 0; f < kProfileFields; ++f) bar.prof[r][f] = 0;
    }
    hopper::mbar_init_fence();
  }
  // 0. start: everyone finished the previous launch.
  if (blockIdx.x == 0) {
    lsa_barrier(a);
    if (threadIdx.x == 0) comm::store_release_sys(a.gate, a.epoch);
  }
  if (threadIdx.x == 0) wait_counter(a, a.gate, a.epoch, FusedWaitSite::start_gate, -1, kCtaBudgets);
  __syncthreads();
  long long tp = prof_lap<kProf>(bar, 0, ProducerPhase::start, t_entry, threadIdx.x == 0);
  if constexpr (kProf) {
    // Each role's total = its end stamp - the entry stamp: the entry is subtracted now, so
    // that no register holds it through the roles.
    if (threadIdx.x % 128 == 0) {
      const int role = threadIdx.x / 128;
      bar.prof[role][role == 0 ? static_cast<int>(ProducerPhase::total) : static_cast<int>(ConsumerPhase::total)] -=
          static_cast<unsigned long long>(t_entry);
    }
  }
  // 1. dispatch, first pass: every warp (the experts the schedule's first tiles need)
  const int warp = static_cast<int>(threadIdx.x) / 32;
  if (a.dispatch_by_block) dispatch_by_block(a);  // A/B only; then no other pass
  else dispatch_pass<4>(a, 0, a.dispatch_first, warp, Shape::kThreads / 32);
  tp = prof_lap<kProf>(bar, 0, ProducerPhase::dispatch_first, tp, threadIdx.x == 0);
  // 2. tiles (roles), 3. combine (consumers)
  const int wg = warp / 4;
  if (wg == 0) {
    hopper::regs_dealloc<Shape::kProducerRegs>();
    const bool agent = a.release_by_agent != 0;
    if (threadIdx.x == 0) {
      producer<kProf>(a, smem, bar);
      prof_lap<kProf>(bar, 0, ProducerPhase::total, 0, true);
      prof_flush<kProf>(a, bar, 0, true);
    } else if (agent && warp == Shape::kReleaseWarp) {
      if (threadIdx.x % 32 == 0) release_agent(a, bar);
    } else if (warp > 0 && !a.dispatch_by_block) {  // 1. the other dispatch passes, while the tiles run
      const int nw = agent ? 2 : 3;                  // warps 1-2 (with the agent) or 1-3
#pragma unroll 1
      for (int lo = a.dispatch_first; lo < a.experts_local; lo += a.dispatch_step)
        dispatch_pass<2>(a, lo, min(lo + a.dispatch_step, a.experts_local), warp - 1, nw);
    }
  } else {
    hopper::regs_alloc<Shape::kConsumerRegs>();
    consumer<kProf>(a, smem, bar, wg - 1, threadIdx.x - 128 * wg);
    combine<kProf>(a, threadIdx.x - 128, bar);
  }
}

}  // namespace xstage::moe::device
