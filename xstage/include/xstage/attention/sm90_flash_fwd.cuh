// FlashAttention-3-class forward kernel for Hopper (sm_90a), bf16 in, fp32
// accumulate, bf16 out.
//
// Roles (one CTA = 3 warpgroups, persistent over query tiles):
//   warpgroup 0  producer: gives registers back (setmaxnreg 32); one thread
//                issues every TMA load: Q of a tile, then K and V block by block
//                into a kStages-deep ring, each completing on its mbarrier.
//   warpgroups 1-2  consumers: take 232 registers; each owns 64 query rows of the
//                128-row tile. Per K/V block n: S = Q·Kₙᵀ (wgmma SS), online
//                softmax (exp2), O += P·Vₙ (wgmma RS, P from registers).
//                Intra-warpgroup overlap: S for block n is issued together with
//                P·V for block n-1, so the softmax of block n runs while the
//                tensor cores do P·V.
//   pingpong     (optional, FwdConfig::pingpong) the consumers take turns to
//                issue their MMAs (mma_turn barriers): while one warpgroup runs
//                its softmax, the other's wgmmas own the tensor cores, instead
//                of both waiting on the same K block and computing exp2 together.
//   epilogue     each consumer stages its normalised 64 x D slice in shared
//                memory and hands it to the Epilogue policy
//                (sm90_flash_fwd_epilogue.cuh): local store now, remote later.
//   agent        (Signal::by_agent policies only) lane 0 of the producer
//                warpgroup's warp 1 walks the CTA's tiles and, once every consumer
//                counted its slice of a tile (slices_done, CTA-scope release /
//                acquire), fences at system scope and calls the policy's tile_done:
//                the wait for the stores to drain is off the consumers' path.
//
// Who waits for whom (mbarriers; "empty" counts one arrival per consumer warp):
//   q_full      producer's expect_tx + TMA bytes      -> consumers may read Q
//   q_empty     8 consumer warps after their last S   -> producer may load the next Q
//   k_full[s]   TMA bytes of K block                  -> consumers issue S
//   k_empty[s]  8 consumer warps after S completed    -> producer refills stage s with K
//   v_full[s]   TMA bytes of V block                  -> consumers issue P·V
//   v_empty[s]  8 consumer warps after P·V completed  -> producer refills stage s with V
//   mma_turn[w] 4 warps of the previous warpgroup after issuing their MMAs
//               -> warpgroup w issues its MMAs (pingpong only; warpgroup
//               kConsumerWGs-1 arrives once at the start so warpgroup 0 goes first)
// Producer and consumers walk the same tile sequence (the static persistent
// scheduler) and the same stage/phase sequence, so no work item is exchanged.
// Every wait has a cycle budget (hopper/mbarrier.cuh): on timeout it records the
// block, thread, WaitSite, stage and parity in the host-mapped report, then
// traps; the host turns that into a message (attention_cuda.hpp:
// explain_device_failure).
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "attention/sm90_flash_fwd_epilogue.cuh"
#include "attention/sm90_flash_fwd_softmax.cuh"
#include "xstage/attention_tiles.hpp"
#include "xstage/hopper/mbarrier.cuh"
#include "xstage/hopper/tma.cuh"
#include "xstage/hopper/wgmma.cuh"

namespace xstage::attention::sm90 {

template <int kHeadDim_, int kConsumerWGs_ = 2, bool kPingpong_ = false>
struct FlashFwdTraits {
  static constexpr int kHeadDim = kHeadDim_;
  static_assert(kHeadDim == 64 || kHeadDim == 128, "head dim 64 or 128");
  static constexpr int kConsumerWGs = kConsumerWGs_;     // 64 query rows each (wgmma M)
  // Three consumer warpgroups (192-row tiles, FA3's choice at D = 64) leave
  // 152-160 registers each, where ptxas spills: only two are instantiated.
  static_assert(kConsumerWGs == 2 || kConsumerWGs == 3, "2 or 3 consumer warpgroups");
  // Pingpong is a compile-time choice: as a run-time flag its (never taken)
  // branches around the MMA issue cost the default path 6-16% (measured A/B
  // against v1, docs/xstage-attention.md), so each setting is its own kernel.
  static constexpr bool kPingpong = kPingpong_;
  static constexpr int kBlockM = 64 * kConsumerWGs;      // query rows per CTA tile
  static constexpr int kBlockN = 128;                    // keys per K/V stage
  static constexpr int kStages = kHeadDim == 64 ? 4 : 2; // what 227 KB of shared memory holds
  static constexpr int kThreads = 128 * (kConsumerWGs + 1);
  static constexpr int kPanelCols = 64;                  // bf16 columns per 128-byte swizzle panel
  static constexpr int kPanels = kHeadDim / kPanelCols;
  static constexpr int kRowBytes = 128;                  // bytes of one row of one panel
  static constexpr int kQBytes = kBlockM * kHeadDim * 2;
  static constexpr int kKVBytes = kBlockN * kHeadDim * 2;
  static constexpr int kOPitch = kHeadDim + 8;           // staging pitch (elements): +16 B per row avoids bank conflicts
  static constexpr int kOBytesPerWG = 64 * kOPitch * 2;
  // Shared memory map (offsets from a 1024-byte aligned base: the 128-byte
  // swizzle pattern repeats every 1024 bytes and wgmma descriptors assume it).
  static constexpr int kOffQ = 0;                        // [panel][kBlockM rows][128 B]
  static constexpr int kOffK = kOffQ + kQBytes;          // [stage][panel][kBlockN rows][128 B]
  static constexpr int kOffV = kOffK + kStages * kKVBytes;
  static constexpr int kOffO = kOffV + kStages * kKVBytes;  // [consumer wg][64][kOPitch] bf16
  static constexpr int kOffBar = kOffO + kConsumerWGs * kOBytesPerWG;
  static constexpr int kBarBytes = 256;
  static constexpr int kSmemBytes = 1024 + kOffBar + kBarBytes;  // + alignment slack
  static_assert(kQBytes % 1024 == 0 && kKVBytes % 1024 == 0, "tiles must keep 1024-byte alignment");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory over the sm_90 per-block limit");
  // Register split (setmaxnreg). Two consumer warpgroups: 128 x 32 + 256 x 232 =
  // 63488 <= 65536; three would leave 152 each. The producer spilled at 24 (64-bit
  // tile arithmetic). A consumer holds S (64) + O (D/2) + P (32) + softmax state
  // + the work tile; ptxas allocates up to 230 for it (no spills: -Xptxas -v).
  static constexpr int kProducerRegs = 32;
  static constexpr int kConsumerRegs = kConsumerWGs == 2 ? 232 : 152;
  static_assert(128 * kProducerRegs + 128 * kConsumerWGs * kConsumerRegs <= 65536, "register file");
};

template <class Epilogue>
struct FlashFwdParams {
  CUtensorMap tma_q;                   // Q as (D, Sq, H, B), box (64, kBlockM, 1, 1), 128-B swizzle
  CUtensorMap tma_k;                   // K as (D, Skv, H, B), box (64, kBlockN, 1, 1), 128-B swizzle
  CUtensorMap tma_v;                   // V likewise
  MaskInfo mask;                       // Sq, Skv, causal
  float scale_log2;                    // softmax scale · log2(e)
  StaticPersistentScheduler scheduler; // tile space, order, snake rounds
  typename Epilogue::Params epilogue;  // where finished slices go
  hopper::WaitTimeoutReport* timeout_report;  // host-mapped; filled by a wait that timed out
};

// Which wait timed out (recorded in the timeout report; names in wait_site_name()).
enum class WaitSite : int { q_full = 1, q_empty, k_full, k_empty, v_full, v_empty, mma_turn, agent };

// Barriers in shared memory.
template <class T>
struct PipelineBarriers {
  uint64_t q_full, q_empty;
  uint64_t k_full[T::kStages], k_empty[T::kStages];
  uint64_t v_full[T::kStages], v_empty[T::kStages];
  uint64_t mma_turn[T::kConsumerWGs];  // pingpong: warpgroup w may issue when its phase completes
  uint32_t slices_done[T::kConsumerWGs];  // Signal::by_agent: slices warpgroup w has stored
};

// Named CTA barriers (id 0 is __syncthreads).
enum class NamedBarrier : int { epilogue_wg0 = 1 };  // + consumer warpgroup index

// Position in the K/V ring.
struct PipeState {
  uint32_t index = 0, phase = 0;
  template <int kStages>
  __device__ __forceinline__ void advance() {
    if (++index == kStages) {
      index = 0;
      phase ^= 1;
    }
  }
};

// One arrival per warp on an "empty" barrier (after the warp's wgmma wait).
__device__ __forceinline__ void warp_arrive(uint64_t* bar, int lane) {
  __syncwarp();
  if (lane == 0) hopper::mbar_arrive(bar);
}

// ---- producer --------------------------------------------------------------
template <class T, class Epilogue>
__device__ __forceinline__ void producer_loop(const FlashFwdParams<Epilogue>& p, uint8_t* smem,
                                              PipelineBarriers<T>& bar) {
  using namespace hopper;
  tma_prefetch_desc(&p.tma_q);
  tma_prefetch_desc(&p.tma_k);
  tma_prefetch_desc(&p.tma_v);
  PipeState st;
  uint32_t q_count = 0;
#pragma unroll 1
  for (WorkTile w = p.scheduler.initial_work(blockIdx.x, gridDim.x); w.valid;
       w = p.scheduler.next_work(w, gridDim.x)) {
    const int m0 = w.m_block * T::kBlockM;
    const int nb = p.mask.n_blocks(m0, T::kBlockM, T::kBlockN);
    if (nb == 0) continue;  // consumers write zeros without touching Q/K/V
    mbar_wait(&bar.q_empty, (q_count & 1) ^ 1, p.timeout_report, int(WaitSite::q_empty));
    ++q_count;
    mbar_arrive_expect_tx(&bar.q_full, T::kQBytes);
#pragma unroll
    for (int pn = 0; pn < T::kPanels; ++pn)
      tma_load_4d(&p.tma_q, &bar.q_full, smem + T::kOffQ + pn * T::kBlockM * T::kRowBytes, pn * T::kPanelCols, m0,
                  w.head, w.batch);
#pragma unroll 1
    for (int n = 0; n < nb; ++n) {
      uint8_t* k_dst = smem + T::kOffK + st.index * T::kKVBytes;
      uint8_t* v_dst = smem + T::kOffV + st.index * T::kKVBytes;
      mbar_wait(&bar.k_empty[st.index], st.phase ^ 1, p.timeout_report, int(WaitSite::k_empty), st.index);
      mbar_arrive_expect_tx(&bar.k_full[st.index], T::kKVBytes);
#pragma unroll
      for (int pn = 0; pn < T::kPanels; ++pn)
        tma_load_4d(&p.tma_k, &bar.k_full[st.index], k_dst + pn * T::kBlockN * T::kRowBytes, pn * T::kPanelCols,
                    n * T::kBlockN, w.head, w.batch);
      mbar_wait(&bar.v_empty[st.index], st.phase ^ 1, p.timeout_report, int(WaitSite::v_empty), st.index);
      mbar_arrive_expect_tx(&bar.v_full[st.index], T::kKVBytes);
#pragma unroll
      for (int pn = 0; pn < T::kPanels; ++pn)
        tma_load_4d(&p.tma_v, &bar.v_full[st.index], v_dst + pn * T::kBlockN * T::kRowBytes, pn * T::kPanelCols,
                    n * T::kBlockN, w.head, w.batch);
      st.template advance<T::kStages>();
    }
  }
}

// ---- agent (Signal::by_agent) ---------------------------------------------------
// One thread. Walks the CTA's tiles in the consumers' order; whenever every consumer
// warpgroup has stored more slices than it has released (slices_done, each
// warpgroup's thread 0 adds 1 with release at CTA scope after its warpgroup barrier),
// one fence.acq_rel.sys, then tile_done for each of those tiles. The consumers' stores
// precede their barrier and the add that the acquire load here observes, so the fence
// orders them before tile_done's signal (cumulativity). No consumer waits for the
// agent: the consumers' code is one shared-memory add per slice (a version with a
// ring of mbarriers, where a consumer could wait for a free slot, ran 10-29 % over
// attention alone on one H200; docs/xstage-ulysses.md). The agent polls with
// hopper::agent_wait_past's backoff (128 ns doubling to kAgentMaxSleepNs) and reports after twice
// the wait budget without progress.
template <class T, class Epilogue>
__device__ __forceinline__ void agent_loop(const FlashFwdParams<Epilogue>& p, PipelineBarriers<T>& bar) {
  using namespace hopper;
  uint32_t released = 0;
  WorkTile w = p.scheduler.initial_work(blockIdx.x, gridDim.x);
#pragma unroll 1
  while (w.valid) {
    const uint32_t done = agent_wait_past<T::kConsumerWGs>(
        bar.slices_done, released, kAgentMaxSleepNs, 2 * kWaitBudgetCycles, [] { return clock64(); }, [&] {
          report_timeout_and_trap(p.timeout_report, reinterpret_cast<const uint64_t*>(bar.slices_done), released,
                                  int(WaitSite::agent), -1);
        });
    asm volatile("fence.acq_rel.sys;" ::: "memory");
#pragma unroll 1
    for (; released < done && w.valid; ++released, w = p.scheduler.next_work(w, gridDim.x))
      Epilogue::tile_done(p.epilogue, w, T::kBlockM, T::kConsumerWGs);
  }
}

// ---- consumer: the two GEMMs ---------------------------------------------------
// S = Q·Kᵀ for one warpgroup: A = its 64 Q rows, B = the K block, both K-major
// with 128-B swizzle; k-step kk lies in panel kk/4 at byte offset 32·(kk%4).
template <class T>
__device__ __forceinline__ void issue_qk(float (&s)[T::kBlockN / 2], uint32_t q_addr, uint32_t k_addr) {
  using namespace hopper;
  wgmma::fence_operand(s);
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < T::kHeadDim / 16; ++kk) {
    const uint32_t off = (kk % 4) * 32;
    const uint64_t da = wgmma::make_desc(q_addr + (kk / 4) * T::kBlockM * T::kRowBytes + off, 0, 1024);
    const uint64_t db = wgmma::make_desc(k_addr + (kk / 4) * T::kBlockN * T::kRowBytes + off, 0, 1024);
    wgmma::mma_ss<T::kBlockN, 0>(s, da, db, kk > 0 ? 1 : 0);
  }
  wgmma::commit();
}

// O += P·V: A = P (registers), B = the V block read transposed (MN-major: the
// head dim is contiguous). k-step kk = keys 16kk..16kk+15 = 2048 bytes further;
// LBO = bytes between the 64-column panels of V.
template <class T>
__device__ __forceinline__ void issue_pv(float (&o)[T::kHeadDim / 2], uint32_t (&pa)[T::kBlockN / 16][4],
                                         uint32_t v_addr) {
  using namespace hopper;
  wgmma::fence_operand(o);
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < T::kBlockN / 16; ++kk) {
    const uint64_t db = wgmma::make_desc(v_addr + kk * 16 * T::kRowBytes, T::kBlockN * T::kRowBytes, 1024);
    wgmma::mma_rs<T::kHeadDim, 1>(o, pa[kk], db, 1);
  }
  wgmma::commit();
}

// ---- consumer --------------------------------------------------------------
template <class T, class Epilogue>
__device__ __forceinline__ void consumer_loop(const FlashFwdParams<Epilogue>& p, uint8_t* smem,
                                              PipelineBarriers<T>& bar, int wg, int tid) {
  using namespace hopper;
  constexpr int kD = T::kHeadDim, kN = T::kBlockN;
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const uint32_t q_addr = smem_addr(smem + T::kOffQ) + wg * 64 * T::kRowBytes;
  const uint32_t k_base = smem_addr(smem + T::kOffK);
  const uint32_t v_base = smem_addr(smem + T::kOffV);
  __nv_bfloat16* staged = reinterpret_cast<__nv_bfloat16*>(smem + T::kOffO + wg * T::kOBytesPerWG);
  const int epi_bar = static_cast<int>(NamedBarrier::epilogue_wg0) + wg;
  PipeState cur;
  uint32_t q_phase = 0;

  // Pingpong turns: wait for this warpgroup's turn before issuing MMAs, hand
  // the turn on once they are issued. The last PV of a tile is issued without
  // a turn (as in FA3); every warpgroup takes the same number of turns.
  // Without pingpong (T::kPingpong false) these compile to nothing.
  [[maybe_unused]] uint32_t turn_phase = 0;
  auto take_turn = [&] {
    if constexpr (T::kPingpong) {
      mbar_wait(&bar.mma_turn[wg], turn_phase, p.timeout_report, int(WaitSite::mma_turn), wg);
      turn_phase ^= 1;
    }
  };
  auto pass_turn = [&] {
    if constexpr (T::kPingpong) warp_arrive(&bar.mma_turn[(wg + 1) % T::kConsumerWGs], lane);
  };
  if constexpr (T::kPingpong) {
    if (wg == T::kConsumerWGs - 1) warp_arrive(&bar.mma_turn[0], lane);  // warpgroup 0 goes first
  }

#pragma unroll 1
  for (WorkTile w = p.scheduler.initial_work(blockIdx.x, gridDim.x); w.valid;
       w = p.scheduler.next_work(w, gridDim.x)) {
    const int m0 = w.m_block * T::kBlockM;
    const int r0 = m0 + wg * 64;  // first query row of this warpgroup
    const int row_a = r0 + warp * 16 + g, row_b = row_a + 8;
    const int nb = p.mask.n_blocks(m0, T::kBlockM, kN);

    float o[kD / 2];
#pragma unroll
    for (int i = 0; i < kD / 2; ++i) o[i] = 0.f;
    OnlineSoftmax<kN> softmax;
    softmax.init(p.scale_log2);

    if (nb > 0) {
      float s[kN / 2];
      uint32_t pa[kN / 16][4];
      float rescale[2];
      mbar_wait(&bar.q_full, q_phase, p.timeout_report, int(WaitSite::q_full));
      q_phase ^= 1;

      // Block 0: S only.
      mbar_wait(&bar.k_full[cur.index], cur.phase, p.timeout_report, int(WaitSite::k_full), cur.index);
      take_turn();
      issue_qk<T>(s, q_addr, k_base + cur.index * T::kKVBytes);
      pass_turn();
      wgmma::wait<0>();
      wgmma::fence_operand(s);
      warp_arrive(&bar.k_empty[cur.index], lane);
      if (nb == 1) warp_arrive(&bar.q_empty, lane);
      if (p.mask.needs_mask(0, kN, r0)) apply_mask<kN>(s, p.mask, 0, row_a, row_b, t);
      softmax.step(s, rescale);  // O is 0: nothing to rescale
      convert_p<kN>(s, pa);
      PipeState prev = cur;
      cur.template advance<T::kStages>();

      // Blocks 1..nb-1: S(n) and P·V(n-1) in flight together.
#pragma unroll 1
      for (int n = 1; n < nb; ++n) {
        mbar_wait(&bar.k_full[cur.index], cur.phase, p.timeout_report, int(WaitSite::k_full), cur.index);
        take_turn();
        issue_qk<T>(s, q_addr, k_base + cur.index * T::kKVBytes);
        mbar_wait(&bar.v_full[prev.index], prev.phase, p.timeout_report, int(WaitSite::v_full), prev.index);
        issue_pv<T>(o, pa, v_base + prev.index * T::kKVBytes);
        pass_turn();
        wgmma::wait<1>();  // S(n) done; P·V(n-1) may still run
        wgmma::fence_operand(s);
        warp_arrive(&bar.k_empty[cur.index], lane);
        if (n == nb - 1) warp_arrive(&bar.q_empty, lane);
        if (p.mask.needs_mask(n, kN, r0)) apply_mask<kN>(s, p.mask, n * kN, row_a, row_b, t);
        softmax.step(s, rescale);
        wgmma::wait<0>();  // P·V(n-1) done
        wgmma::fence_operand(o);
        wgmma::fence_operand(pa);
        warp_arrive(&bar.v_empty[prev.index], lane);
        scale_rows<kD>(o, rescale);
        convert_p<kN>(s, pa);
        prev = cur;
        cur.template advance<T::kStages>();
      }

      // Last P·V.
      mbar_wait(&bar.v_full[prev.index], prev.phase, p.timeout_report, int(WaitSite::v_full), prev.index);
      issue_pv<T>(o, pa, v_base + prev.index * T::kKVBytes);
      wgmma::wait<0>();
      wgmma::fence_operand(o);
      wgmma::fence_operand(pa);
      warp_arrive(&bar.v_empty[prev.index], lane);
    }

    // Normalise.
    float inv[2], lse[2];
    softmax.finalize(inv, lse);
    scale_rows<kD>(o, inv);

    // Epilogue: stage the slice as bf16, then the policy stores it.
    named_sync(epi_bar, 128);  // the previous slice's staged reads are done
#pragma unroll
    for (int jj = 0; jj < kD / 8; ++jj) {
      const int col = 8 * jj + 2 * t;
      *reinterpret_cast<uint32_t*>(staged + (warp * 16 + g) * T::kOPitch + col) = pack_bf16x2(o[4 * jj], o[4 * jj + 1]);
      *reinterpret_cast<uint32_t*>(staged + (warp * 16 + g + 8) * T::kOPitch + col) =
          pack_bf16x2(o[4 * jj + 2], o[4 * jj + 3]);
    }
    named_sync(epi_bar, 128);
    const int valid = p.mask.Sq - r0;
    const OutputSlice slice{w.batch, w.head, r0, valid < 0 ? 0 : (valid > 64 ? 64 : valid)};
    store_staged_slice<kD>(Epilogue::target(p.epilogue, slice), slice.rows, staged, T::kOPitch, tid);
    if (t == 0) {
      if (row_a < p.mask.Sq) Epilogue::store_lse(p.epilogue, slice, row_a - r0, lse[0]);
      if (row_b < p.mask.Sq) Epilogue::store_lse(p.epilogue, slice, row_b - r0, lse[1]);
    }
    if constexpr (Epilogue::kSignal == Signal::per_slice) {
      named_sync(epi_bar, 128);
      Epilogue::slice_done(p.epilogue, slice, tid);
    } else if constexpr (Epilogue::kSignal == Signal::by_agent) {
      named_sync(epi_bar, 128);  // every thread's stores of the slice are issued
      if (tid == 0) smem_add_release(&bar.slices_done[wg], 1);
    } else if constexpr (Epilogue::kSignal == Signal::at_exit) {
      // After this warpgroup's last slice, inside the loop: the same code after
      // the loop made ptxas spill the D = 128 consumer (440 bytes), even when
      // nothing there needed a value from before the loop. is_last is index
      // arithmetic only: the version that decoded the next tile and walked the
      // schedule again to count slices per owner ran 8-24 % over attention alone
      // on one H200, its SASS ~1,600 instructions longer (docs/xstage-ulysses.md).
      if (p.scheduler.is_last(w, gridDim.x)) {
        named_sync(epi_bar, 128);  // every thread's stores of every slice are issued
        Epilogue::worker_done(p.epilogue, tid);
      }
    }
  }
}

// ---- kernel ----------------------------------------------------------------
template <class T, class Epilogue>
__global__ void __launch_bounds__(T::kThreads, 1) flash_fwd_kernel(const __grid_constant__ FlashFwdParams<Epilogue> p) {
  // Shared memory: 1024-byte aligned base (swizzle atoms), then the map in T.
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  auto& bar = *reinterpret_cast<PipelineBarriers<T>*>(smem + T::kOffBar);
  static_assert(sizeof(PipelineBarriers<T>) <= T::kBarBytes, "barrier area");

  // Barriers.
  if (threadIdx.x == 0) {
    constexpr uint32_t kConsumerWarps = 4 * T::kConsumerWGs;
    hopper::mbar_init(&bar.q_full, 1);
    hopper::mbar_init(&bar.q_empty, kConsumerWarps);
#pragma unroll
    for (int s = 0; s < T::kStages; ++s) {
      hopper::mbar_init(&bar.k_full[s], 1);
      hopper::mbar_init(&bar.k_empty[s], kConsumerWarps);
      hopper::mbar_init(&bar.v_full[s], 1);
      hopper::mbar_init(&bar.v_empty[s], kConsumerWarps);
    }
    if constexpr (T::kPingpong) {
#pragma unroll
      for (int w = 0; w < T::kConsumerWGs; ++w) hopper::mbar_init(&bar.mma_turn[w], 4);
    }
#pragma unroll
    for (int w = 0; w < T::kConsumerWGs; ++w) bar.slices_done[w] = 0;
    hopper::mbar_init_fence();
  }
  __syncthreads();

  // Roles. Each warpgroup's role is one branch, so setmaxnreg applies.
  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    // The agent's tile walk and signal spill at 32 registers; 40 still fit the register
    // file beside the consumers' 232 (128 x 40 + 256 x 232 = 64512).
    constexpr int kProducerRegs = Epilogue::kSignal == Signal::by_agent ? 40 : T::kProducerRegs;
    static_assert(128 * kProducerRegs + 128 * T::kConsumerWGs * T::kConsumerRegs <= 65536, "register file");
    hopper::regs_dealloc<kProducerRegs>();
    if (threadIdx.x == 0) producer_loop<T>(p, smem, bar);
    if constexpr (Epilogue::kSignal == Signal::by_agent) {
      if (threadIdx.x == 32) agent_loop<T>(p, bar);
    }
  } else {
    hopper::regs_alloc<T::kConsumerRegs>();
    consumer_loop<T>(p, smem, bar, wg - 1, threadIdx.x - 128 * wg);
  }
}

}  // namespace xstage::attention::sm90
