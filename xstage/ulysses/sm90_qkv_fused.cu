// The QKV projection whose epilogue performs the pre-attention All-to-All
// (sm_90a, one persistent CTA per SM; protocol and layouts in xstage/ulysses/qkv.hpp).
//
// Inside a CTA (the shape of the fused MoE kernel's GEMM):
//   warpgroup 0   producer: setmaxnreg 40; thread 0 streams the K steps of its
//                 entries (CTA b: order[b], order[b + grid], ...) into a 4-deep ring
//                 of 48 KiB stages by TMA: h 128 x 64, W rows of head 2c, W rows of
//                 head 2c + 1 (zero-filled past 3H), 128-byte swizzle; a one-head
//                 entry (split tail, qkv_split_tail) loads h and that head's rows.
//   warpgroups 1-2 consumers: setmaxnreg 232; each owns 64 rows and two 64 x 128
//                 fp32 accumulators (one per head); 4 wgmma m64n256k16 per stage
//                 (4 m64n128k16 for a one-head entry, into acc0), one group in flight.
//   epilogue      per head, in registers: + bias; q and k: RMSNorm over the 128
//                 columns of a row (the row's values sit in the 4 lanes of a quad:
//                 two xor shuffles), times the norm weight, rotary turn of pair
//                 (2i, 2i + 1), both in the same thread; bf16; staged in shared
//                 memory 64 columns at a time (144-byte rows), then 16-byte stores
//                 of whole rows into the owner's q/k/v (REMOTE when owner != rank:
//                 store_heads_to_owners).
//                 After a tile: fence.acq_rel.sys, one red.add per head on its
//                 owner's completion counter for this rank; by default
//                 (release_by_agent) each warpgroup's thread 0 only counts the tile
//                 in shared memory (release, CTA scope) and lane 0 of the producer
//                 warpgroup's warp 1 fences and adds for both warpgroups once both
//                 counted it, so no consumer waits for its stores to drain.
// Start: block 0 raises this rank's ready flag on every owner (st.release.sys of
// the launch number); each consumer warpgroup acquires every owner's flag before
// its first store (the owner has finished what preceded this launch on its stream,
// i.e. its previous attention no longer reads the buffers). Every wait has a
// budget (sync/wait.cuh); on timeout it fills the host-mapped report and traps (no
// printf: a call would make ptxas serialise the wgmmas).
//
// Files: the shape and barriers (sm90_qkv_fused_traits.cuh), the producer's loads and
// the consumers' GEMM (_mainloop), norms, RoPE, the remote stores and the release
// (_epilogue); this file orchestrates.
#include "common/cuda_check.hpp"
#include "sm90_qkv_fused_epilogue.cuh"
#include "sm90_qkv_fused_mainloop.cuh"
#include "sm90_qkv_fused_traits.cuh"
#include "xstage/hopper/mbarrier.cuh"
#include "xstage/sync/ptx.cuh"
#include "xstage/ulysses/qkv.hpp"
#include "xstage/ulysses/qkv_fused.hpp"

namespace xstage::ulysses {

namespace qkv_device {

// ---- consumer: one warpgroup over the CTA's entries -------------------------------
__device__ void consumer(const QkvArgs& a, uint8_t* smem, Barriers& bar, int wg, int tid) {
  const int lane = tid % 32;
  const uint32_t stages_addr = hopper::smem_addr(smem);
  std::uint16_t* staged = reinterpret_cast<std::uint16_t*>(smem + kOffStaging + wg * kStagingBytesPerWG);
  const int epi_bar = 1 + wg;
  bool owners_ready = false;
  sync::RingPos stage;
  float acc0[64], acc1[64];
#pragma unroll 1
  for (int i = blockIdx.x; i < a.n_entries; i += gridDim.x) {
    const int e = a.order[i];
    // Mainloop (a one-head entry multiplies only its box).
    consumer_mainloop(a, bar, stages_addr, stage, qkv_entry_sel(e) == 0, wg, lane, acc0, acc1);
    if (!owners_ready) {  // once per launch, before the first store
      if (tid == 0) wait_owners_ready(a);
      hopper::named_sync(epi_bar, 128);
      owners_ready = true;
    }
    // Epilogue: norms, RoPE, the remote stores, then the release.
    const int row0 = (qkv_entry_tile(e) / a.col_tiles) * kQkvTileRows + wg * 64;
    store_heads_to_owners(a, acc0, acc1, e, row0, staged, epi_bar, tid);
    hopper::named_sync(epi_bar, 128);  // every thread's stores of the tile precede the release
    if (tid == 0) release_entry(a, bar, e, wg);
  }
}

// ---- kernel -----------------------------------------------------------------------
__global__ void __launch_bounds__(kThreads, 1) qkv_fused_kernel(const __grid_constant__ QkvArgs a) {
  // Shared memory: the stage ring, the consumers' staging, the barriers (traits).
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  auto& bar = *reinterpret_cast<Barriers*>(smem + kOffBar);
  // Barriers.
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      hopper::mbar_init(&bar.full[s], 1);
      hopper::mbar_init(&bar.empty[s], kConsumerWarps);
    }
#pragma unroll
    for (int w = 0; w < kConsumerWGs; ++w) bar.tiles_done[w] = 0;
    hopper::mbar_init_fence();
  }
  // This rank has started the launch: raise its ready flag on every owner.
  if (blockIdx.x == 0 && threadIdx.x < a.ranks) sync::st_release_sys(a.ready_out[threadIdx.x], a.epoch);
  __syncthreads();
  // Roles: the scheduler is static (CTA b: entries b, b + grid, ...).
  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    hopper::regs_dealloc<kProducerRegs>();
    if (threadIdx.x == 0) producer(a, smem, bar);                                       // producer: TMA loads
    else if (threadIdx.x == 32 && a.release_by_agent) release_agent(a, bar);            // epilogue: release agent
  } else {
    hopper::regs_alloc<kConsumerRegs>();
    consumer(a, smem, bar, wg - 1, threadIdx.x - 128 * wg);  // consumer: GEMM, norms, RoPE, remote stores
  }
}

}  // namespace qkv_device

void launch_qkv_kernel(const QkvArgs& a, int grid, cudaStream_t stream) {
  XS_CHECK_CUDA(cudaFuncSetAttribute(qkv_device::qkv_fused_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     qkv_device::kSmemBytes));
  qkv_device::qkv_fused_kernel<<<grid, qkv_device::kThreads, qkv_device::kSmemBytes, stream>>>(a);
  XS_CHECK_LAUNCH();
}

}  // namespace xstage::ulysses
