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
//                (sm90_flash_fwd_epilogue.cuh): a local store, or the Ulysses
//                REMOTE STORE into the owner's output.
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
// Every wait has a budget (sync/wait.cuh): on timeout it records the block, thread,
// AttentionSite, stage and parity in the host-mapped report of FlashFwdParams::wait,
// then traps; the host turns that into one line (explain_device_failure).
//
// Files: the traits, parameters and barriers (sm90_flash_fwd_traits.cuh), the
// producer's loads and the consumers' GEMMs (_mainloop), the softmax (_softmax), the
// epilogue policies, the kernel's store and signal, and the release agent (_epilogue).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "xstage/attention/sm90_flash_fwd_epilogue.cuh"
#include "xstage/attention/sm90_flash_fwd_mainloop.cuh"
#include "xstage/attention/sm90_flash_fwd_softmax.cuh"
#include "xstage/attention/sm90_flash_fwd_traits.cuh"
#include "xstage/hopper/mbarrier.cuh"

namespace xstage::attention::sm90 {

// ---- consumer: tile loop ---------------------------------------------------------
// One consumer warpgroup (wg of the consumers, tid 0..127) over the CTA's tiles:
// mainloop, normalise, epilogue.
template <class T, class Epilogue>
__device__ __forceinline__ void consumer_loop(const FlashFwdParams<Epilogue>& p, uint8_t* smem,
                                              PipelineBarriers<T>& bar, int wg, int tid) {
  using namespace hopper;
  constexpr int kD = T::kHeadDim;
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  ConsumerPos pos{smem_addr(smem + T::kOffQ) + wg * 64 * T::kRowBytes, smem_addr(smem + T::kOffK),
                  smem_addr(smem + T::kOffV)};
  __nv_bfloat16* staged = reinterpret_cast<__nv_bfloat16*>(smem + T::kOffO + wg * T::kOBytesPerWG);
  const int epi_bar = static_cast<int>(NamedBarrier::epilogue_wg0) + wg;
  MmaTurns<T> turns{bar.mma_turn, wg, lane};
  turns.start();
#pragma unroll 1
  for (WorkTile w = p.scheduler.initial_work(blockIdx.x, gridDim.x); w.valid;
       w = p.scheduler.next_work(w, gridDim.x)) {
    const int m0 = w.m_block * T::kBlockM;
    const int r0 = m0 + wg * 64;  // first query row of this warpgroup
    const int row_a = r0 + warp * 16 + g, row_b = row_a + 8;
    const int nb = p.mask.n_blocks(m0, T::kBlockM, T::kBlockN);
    float o[kD / 2];
#pragma unroll
    for (int i = 0; i < kD / 2; ++i) o[i] = 0.f;
    OnlineSoftmax<T::kBlockN> softmax;
    softmax.init(p.scale_log2);
    if (nb > 0) consumer_mainloop<T>(p, bar, pos, turns, nb, r0, row_a, row_b, lane, t, o, softmax);
    float inv[2], lse[2];  // normalise
    softmax.finalize(inv, lse);
    scale_rows<kD>(o, inv);
    consumer_epilogue<T>(p, bar, w, o, lse, staged, epi_bar, wg, r0, row_a, row_b, tid);
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

  // Roles (the scheduler is static: producer, consumers and agent walk the same tiles).
  // Each warpgroup's role is one branch, so setmaxnreg applies.
  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    // The agent's tile walk and signal spill at 32 registers; 40 still fit the register
    // file beside the consumers' 232 (128 x 40 + 256 x 232 = 64512).
    constexpr int kProducerRegs = Epilogue::kSignal == Signal::by_agent ? 40 : T::kProducerRegs;
    static_assert(128 * kProducerRegs + 128 * T::kConsumerWGs * T::kConsumerRegs <= 65536, "register file");
    hopper::regs_dealloc<kProducerRegs>();
    if (threadIdx.x == 0) producer_loop<T>(p, smem, bar);  // producer: TMA loads
    if constexpr (Epilogue::kSignal == Signal::by_agent) {
      if (threadIdx.x == 32) agent_loop<T>(p, bar);  // epilogue: release agent
    }
  } else {
    hopper::regs_alloc<T::kConsumerRegs>();
    consumer_loop<T>(p, smem, bar, wg - 1, threadIdx.x - 128 * wg);  // consumer: MMA, softmax, store
  }
}

}  // namespace xstage::attention::sm90
