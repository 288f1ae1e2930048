// Device side of the communication layer: flags, waits and barriers with timeouts.
//
// Memory ordering protocol ("data is complete"):
//   sender : plain or bulk stores of the payload to the peer's window
//            -> signal_release(flag, v): fence.acq_rel.sys; st.relaxed.sys flag = v
//   receiver: wait_geq_acquire(flag, v): ld.acquire.sys until flag >= v
//            -> reads of the payload are ordered after the flag read.
// A release store at system scope waits for the issuing thread's earlier stores
// (and, by cumulativity, those it observed through a CTA barrier) to be performed,
// so it must come after a __syncthreads() when other threads wrote the payload.
//
// Every wait has a budget in ns (WaitBudget). On timeout the waiting thread prints
// rank, what it waited for, the value expected and the value seen, then traps:
// the host sees cudaErrorLaunchFailure at its next sync instead of hanging.
#pragma once

#include <cuda/atomic>
#include <nccl_device.h>

#include <cstdint>

#include "xstage/comm_device_types.hpp"

namespace xstage::comm {

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ uint32_t load_acquire_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void store_relaxed_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ void store_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// Release a flag on a peer (or locally): all earlier stores of this thread, and
// of threads synchronised with it by a barrier, become visible before the flag.
__device__ __forceinline__ void signal_release(uint32_t* flag, uint32_t value) {
  asm volatile("fence.acq_rel.sys;" ::: "memory");
  store_relaxed_sys(flag, value);
}

[[noreturn]] __device__ __forceinline__ void report_timeout(const WaitBudget& b, const char* what,
                                                            const void* where, uint32_t expected, uint32_t seen) {
  printf("xstage device timeout: rank %d block %d thread %d waited %.3f s for %s at %p: expected >= %u, saw %u\n",
         b.rank, blockIdx.x, threadIdx.x, b.timeout_ns * 1e-9, what, where, expected, seen);
  __trap();
  __builtin_unreachable();
}

// Spins until *flag >= expected (wrap-safe compare), with acquire ordering.
__device__ __forceinline__ uint32_t wait_geq_acquire(const uint32_t* flag, uint32_t expected, const WaitBudget& b,
                                                     const char* what) {
  const unsigned long long start = global_ns();
  uint32_t seen;
  #pragma unroll 1
  while (true) {
    seen = load_acquire_sys(flag);
    if (static_cast<int32_t>(seen - expected) >= 0) return seen;
    if (global_ns() - start > b.timeout_ns) report_timeout(b, what, flag, expected, seen);
  }
}

// Cross-GPU barrier over the LSA team with a timeout. NCCL's barrier session does
// the arrive (release stores into each peer's inbox); the wait is ours so that it
// can give up. Call with all threads of the block; uses barrier `index`
// (one per block, 0..lsaBarrierCount-1).
__device__ __forceinline__ void lsa_barrier_sync(const ncclDevComm& dev, uint32_t index, const WaitBudget& b) {
  ncclCoopCta cta;
  ncclLsaBarrierSession<ncclCoopCta> bar(cta, dev, ncclTeamTagLsa{}, index);
  bar.arrive(cta, cuda::memory_order_release);
  for (int i = threadIdx.x; i < bar.team.nRanks - 1; i += blockDim.x) {
    const int peer = i + (bar.team.rank <= i ? 1 : 0);
    const uint32_t* inbox = bar.ucInbox(bar.team.rank, peer);
    wait_geq_acquire(inbox, bar.epoch + 1, b, "LSA barrier arrival");
  }
  bar.epoch += 1;
  __syncthreads();
}

}  // namespace xstage::comm
