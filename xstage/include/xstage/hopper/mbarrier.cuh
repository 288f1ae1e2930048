// mbarrier (shared-memory transaction barrier) wrappers, and the named CTA
// barriers (bar.sync / bar.arrive) used between warpgroups.
//
// Phase protocol: a barrier starts in phase 0. wait(bar, parity) returns once
// the phase with that parity has completed. Consumers of a "full" barrier wait
// with parity = their phase bit (0 first); producers of an "empty" barrier wait
// with parity = phase ^ 1, which a fresh barrier satisfies at once (the slot
// starts empty).
//
// Every wait has a cycle budget (kWaitBudgetCycles). On timeout it writes the
// block, thread, barrier, stage and parity into a WaitTimeoutReport, then traps,
// so the host sees an error at its next synchronisation instead of a hang, and
// can say which wait it was (hopper/timeout_report.hpp).
#pragma once

#include <cstdint>

#include "xstage/hopper/timeout_report.hpp"

namespace xstage::hopper {

// About 2 s at 1.98 GHz: far beyond any legitimate wait for one tile, even
// under compute-sanitizer.
inline constexpr long long kWaitBudgetCycles = 4'000'000'000LL;

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

__device__ __forceinline__ void report_timeout_and_trap(WaitTimeoutReport* r, const uint64_t* bar, uint32_t parity,
                                                        int site, int stage) {
  if (r != nullptr && atomicCAS(&r->flag, 0, 2) == 0) {  // first reporter wins
    volatile WaitTimeoutReport* v = r;
    v->block = static_cast<int>(blockIdx.x);
    v->thread = static_cast<int>(threadIdx.x);
    v->site = site;
    v->stage = stage;
    v->parity = parity;
    v->smem = smem_addr(bar);
    __threadfence_system();
    v->flag = 1;
    __threadfence_system();
  }
  asm volatile("trap;");
}

// Blocks until the phase with `parity` completed; after the cycle budget it
// fills the report (if any) and traps.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity, WaitTimeoutReport* report = nullptr,
                                          int site = 0, int stage = -1) {
  if (mbar_try_wait(bar, parity)) return;
  const long long start = clock64();
#pragma unroll 1
  while (!mbar_try_wait(bar, parity)) {
    if (clock64() - start > kWaitBudgetCycles) report_timeout_and_trap(report, bar, parity, site, stage);
  }
}

// Position in a ring of N mbarrier-guarded slots: the slot and the phase parity a
// consumer waits for on its "full" barrier (a producer waits for parity ^ 1 on
// "empty"). Producer and consumers advance their own copies in the same order.
struct RingPos {
  uint32_t index = 0, phase = 0;
  template <int N>
  __device__ __forceinline__ void advance() {
    if (++index == N) {
      index = 0;
      phase ^= 1;
    }
  }
};

// One arrival per warp (lane 0, after the warp converged) on a barrier that
// counts warps.
__device__ __forceinline__ void mbar_warp_arrive(uint64_t* bar, int lane) {
  __syncwarp();
  if (lane == 0) mbar_arrive(bar);
}

// Counters in shared memory between the warps of one CTA: a release add (what the
// adding thread wrote or observed before happens before any acquire load that sees
// the sum) and an acquire load.
__device__ __forceinline__ void smem_add_release(uint32_t* counter, uint32_t v) {
  asm volatile("red.release.cta.shared::cta.add.u32 [%0], %1;\n" ::"r"(smem_addr(counter)), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t smem_load_acquire(const uint32_t* counter) {
  uint32_t v;
  asm volatile("ld.acquire.cta.shared::cta.u32 %0, [%1];\n" : "=r"(v) : "r"(smem_addr(counter)) : "memory");
  return v;
}

// The release agents' wait (one lane of a producer warpgroup that fences and signals
// the tiles other warpgroups stored; the Ulysses attention and fused QKV kernels):
// returns the lowest of the kN counters once it is past `released`. While none has
// moved it sleeps, 128 ns doubling up to `max_sleep_ns`, so that its loop takes few
// issue slots from the computing warps beside it; a larger cap costs up to one cap of
// latency on the last release. After `budget` (in units of now()) without progress it
// calls stuck(), which must not return (report and trap). 256 ns: with 2 us the fused QKV
// kernel was 0.3 % slower over 12 shapes and 1.5-2.6 % at its shortest (flux-like, P = 4),
// one cap at its tail (one H200, session 11, docs/xstage-ulysses.md).
inline constexpr uint32_t kAgentMaxSleepNs = 256;
template <int kN, class Now, class Budget, class Stuck>
__device__ __forceinline__ uint32_t agent_wait_past(const uint32_t* counters, uint32_t released,
                                                    uint32_t max_sleep_ns, Budget budget, Now now, Stuck stuck) {
  uint32_t sleep_ns = 128;
  const auto since = now();
#pragma unroll 1
  while (true) {
    uint32_t done = smem_load_acquire(&counters[0]);
#pragma unroll
    for (int c = 1; c < kN; ++c) done = min(done, smem_load_acquire(&counters[c]));
    if (done != released) return done;
    if (now() - since > budget) stuck();
    __nanosleep(sleep_ns);
    sleep_ns = min(2 * sleep_ns, max_sleep_ns);
  }
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
