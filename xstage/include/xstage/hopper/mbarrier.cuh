// mbarrier (shared-memory transaction barrier) wrappers, and the named CTA
// barriers (bar.sync / bar.arrive) used between warpgroups.
//
// Phase protocol: a barrier starts in phase 0. A wait for `parity` (mbar_try_wait,
// or sync::wait_phase with its timeout) returns once the phase with that parity has
// completed. Consumers of a "full" barrier wait
// with parity = their phase bit (0 first); producers of an "empty" barrier wait
// with parity = phase ^ 1, which a fresh barrier satisfies at once (the slot
// starts empty).
//
// The waits themselves, with their timeouts, are sync::wait_phase (sync/wait.cuh).
#pragma once

#include <cstdint>

namespace xstage::hopper {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(arrivals) : "memory");
}
// Makes initialised barriers visible to the async proxy (TMA) and other threads;
// follow with a CTA-wide barrier.
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
// Arrive once and add `bytes` to the transaction count the phase waits for.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}

// One poll of a phase. try_wait may suspend the thread until the phase completes or a
// time limit passes (the hardware's, or `ns` given as the suspend-time hint), so a
// waiting thread issues almost nothing; test_wait returns at once.
__device__ __forceinline__ bool mbar_try_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(smem_addr(bar)), "r"(parity)
      : "memory");
  return done != 0;
}
__device__ __forceinline__ bool mbar_try_wait_for(uint64_t* bar, uint32_t parity, uint32_t ns) {
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2, %3;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(smem_addr(bar)), "r"(parity), "r"(ns)
      : "memory");
  return done != 0;
}

// One arrival per warp (lane 0, after the warp converged) on a barrier that
// counts warps.
__device__ __forceinline__ void mbar_warp_arrive(uint64_t* bar, int lane) {
  __syncwarp();
  if (lane == 0) mbar_arrive(bar);
}

// Named CTA barriers (ids 1..15; 0 is __syncthreads). `threads` counts every
// thread that syncs or arrives, a multiple of 32.
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Register budget hand-off between warpgroups (sm_90a). Needs a register cap at
// kernel entry (__launch_bounds__(threads, 1)); every warp of the warpgroup
// executes it.
template <int Regs>
__device__ __forceinline__ void regs_dealloc() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Regs));
}
template <int Regs>
__device__ __forceinline__ void regs_alloc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Regs));
}

}  // namespace xstage::hopper
