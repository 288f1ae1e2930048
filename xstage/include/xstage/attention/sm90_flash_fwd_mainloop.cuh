// Mainloop of the attention forward kernel: the producer's TMA loads and a consumer
// warpgroup's two GEMMs with the online softmax between them, for one query tile.
//
// Producer (one thread): per tile, Q once (q_empty -> q_full), then K and V block by
// block into the kStages-deep ring (k_empty/v_empty -> k_full/v_full, expect_tx +
// TMA bytes). Consumer (one warpgroup, 64 query rows): per K/V block n, S = Q·Kₙᵀ
// (wgmma SS), softmax, O += P·Vₙ (wgmma RS, P from registers); S for block n is
// issued together with P·V for block n-1, so the softmax of block n runs while the
// tensor cores do P·V. Both walk the same tiles (the static persistent scheduler) and
// the same ring positions, so no work item is exchanged.
#pragma once

#include <cstdint>

#include "xstage/attention/sm90_flash_fwd_softmax.cuh"
#include "xstage/attention/sm90_flash_fwd_traits.cuh"
#include "xstage/hopper/mbarrier.cuh"
#include "xstage/hopper/tma.cuh"
#include "xstage/hopper/wgmma.cuh"
#include "xstage/sync/ring.cuh"
#include "xstage/sync/wait.cuh"

namespace xstage::attention::sm90 {

// ---- producer: TMA loads ----------------------------------------------------------
template <class T, class Epilogue>
__device__ __forceinline__ void producer_loop(const FlashFwdParams<Epilogue>& p, uint8_t* smem,
                                              PipelineBarriers<T>& bar) {
  using namespace hopper;
  using S = AttentionSite;
  tma_prefetch_desc(&p.tma_q);
  tma_prefetch_desc(&p.tma_k);
  tma_prefetch_desc(&p.tma_v);
  sync::RingPos st;
  uint32_t q_count = 0;
#pragma unroll 1
  for (WorkTile w = p.scheduler.initial_work(blockIdx.x, gridDim.x); w.valid;
       w = p.scheduler.next_work(w, gridDim.x)) {
    const int m0 = w.m_block * T::kBlockM;
    const int nb = p.mask.n_blocks(m0, T::kBlockM, T::kBlockN);
    if (nb == 0) continue;  // consumers write zeros without touching Q/K/V
    sync::wait_phase(p.wait, &bar.q_empty, (q_count & 1) ^ 1, S::q_empty, -1);
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
      sync::wait_phase(p.wait, &bar.k_empty[st.index], st.phase ^ 1, S::k_empty, st.index);
      mbar_arrive_expect_tx(&bar.k_full[st.index], T::kKVBytes);
#pragma unroll
      for (int pn = 0; pn < T::kPanels; ++pn)
        tma_load_4d(&p.tma_k, &bar.k_full[st.index], k_dst + pn * T::kBlockN * T::kRowBytes, pn * T::kPanelCols,
                    n * T::kBlockN, w.head, w.batch);
      sync::wait_phase(p.wait, &bar.v_empty[st.index], st.phase ^ 1, S::v_empty, st.index);
      mbar_arrive_expect_tx(&bar.v_full[st.index], T::kKVBytes);
#pragma unroll
      for (int pn = 0; pn < T::kPanels; ++pn)
        tma_load_4d(&p.tma_v, &bar.v_full[st.index], v_dst + pn * T::kBlockN * T::kRowBytes, pn * T::kPanelCols,
                    n * T::kBlockN, w.head, w.batch);
      st.template advance<T::kStages>();
    }
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

// Pingpong turns (T::kPingpong): a consumer warpgroup waits for its turn before it
// issues its MMAs and hands the turn on once they are issued, so that one warpgroup's
// softmax runs under the other's MMAs. The last P·V of a tile is issued without a
// turn (as in FA3); every warpgroup takes the same number of turns. Without pingpong
// every call compiles to nothing.
template <class T>
struct MmaTurns {
  uint64_t* turn;  // PipelineBarriers::mma_turn
  int wg, lane;
  uint32_t phase = 0;
  __device__ __forceinline__ void start() {  // warpgroup 0 goes first
    if constexpr (T::kPingpong)
      if (wg == T::kConsumerWGs - 1) hopper::mbar_warp_arrive(&turn[0], lane);
  }
  __device__ __forceinline__ void take(const sync::WaitContext& ctx) {
    if constexpr (T::kPingpong) {
      sync::wait_phase(ctx, &turn[wg], phase, AttentionSite::mma_turn, wg);
      phase ^= 1;
    }
  }
  __device__ __forceinline__ void pass() {
    if constexpr (T::kPingpong) hopper::mbar_warp_arrive(&turn[(wg + 1) % T::kConsumerWGs], lane);
  }
};

// Where a consumer warpgroup is in the shared ring and its Q tiles.
struct ConsumerPos {
  uint32_t q_addr, k_base, v_base;  // shared addresses: this warpgroup's Q rows, the K and V rings
  sync::RingPos cur;                // the next K/V stage
  uint32_t q_phase = 0;
};

// One query tile of nb > 0 K/V blocks: O (unnormalised) and the softmax state of this
// warpgroup's rows [r0, r0 + 64); row_a/row_b: the thread's two rows, t: lane % 4.
template <class T, class Epilogue>
__device__ __forceinline__ void consumer_mainloop(const FlashFwdParams<Epilogue>& p, PipelineBarriers<T>& bar,
                                                  ConsumerPos& pos, MmaTurns<T>& turns, int nb, int r0, int row_a,
                                                  int row_b, int lane, int t, float (&o)[T::kHeadDim / 2],
                                                  OnlineSoftmax<T::kBlockN>& softmax) {
  using namespace hopper;
  using S = AttentionSite;
  constexpr int kN = T::kBlockN;
  float s[kN / 2];
  uint32_t pa[kN / 16][4];
  float rescale[2];
  sync::wait_phase(p.wait, &bar.q_full, pos.q_phase, S::q_full, -1);
  pos.q_phase ^= 1;

  // Block 0: S only.
  sync::wait_phase(p.wait, &bar.k_full[pos.cur.index], pos.cur.phase, S::k_full, pos.cur.index);
  turns.take(p.wait);
  issue_qk<T>(s, pos.q_addr, pos.k_base + pos.cur.index * T::kKVBytes);
  turns.pass();
  wgmma::wait<0>();
  wgmma::fence_operand(s);
  mbar_warp_arrive(&bar.k_empty[pos.cur.index], lane);
  if (nb == 1) mbar_warp_arrive(&bar.q_empty, lane);
  if (p.mask.needs_mask(0, kN, r0)) apply_mask<kN>(s, p.mask, 0, row_a, row_b, t);
  softmax.step(s, rescale);  // O is 0: nothing to rescale
  convert_p<kN>(s, pa);
  sync::RingPos prev = pos.cur;
  pos.cur.template advance<T::kStages>();

  // Blocks 1..nb-1: S(n) and P·V(n-1) in flight together.
#pragma unroll 1
  for (int n = 1; n < nb; ++n) {
    sync::wait_phase(p.wait, &bar.k_full[pos.cur.index], pos.cur.phase, S::k_full, pos.cur.index);
    turns.take(p.wait);
    issue_qk<T>(s, pos.q_addr, pos.k_base + pos.cur.index * T::kKVBytes);
    sync::wait_phase(p.wait, &bar.v_full[prev.index], prev.phase, S::v_full, prev.index);
    issue_pv<T>(o, pa, pos.v_base + prev.index * T::kKVBytes);
    turns.pass();
    wgmma::wait<1>();  // S(n) done; P·V(n-1) may still run
    wgmma::fence_operand(s);
    mbar_warp_arrive(&bar.k_empty[pos.cur.index], lane);
    if (n == nb - 1) mbar_warp_arrive(&bar.q_empty, lane);
    if (p.mask.needs_mask(n, kN, r0)) apply_mask<kN>(s, p.mask, n * kN, row_a, row_b, t);
    softmax.step(s, rescale);
    wgmma::wait<0>();  // P·V(n-1) done
    wgmma::fence_operand(o);
    wgmma::fence_operand(pa);
    mbar_warp_arrive(&bar.v_empty[prev.index], lane);
    scale_rows<T::kHeadDim>(o, rescale);
    convert_p<kN>(s, pa);
    prev = pos.cur;
    pos.cur.template advance<T::kStages>();
  }

  // Last P·V.
  sync::wait_phase(p.wait, &bar.v_full[prev.index], prev.phase, S::v_full, prev.index);
  issue_pv<T>(o, pa, pos.v_base + prev.index * T::kKVBytes);
  wgmma::wait<0>();
  wgmma::fence_operand(o);
  wgmma::fence_operand(pa);
  mbar_warp_arrive(&bar.v_empty[prev.index], lane);
}

}  // namespace xstage::attention::sm90
