// Every device wait, with a timeout: a counter in global memory (acquire at system
// scope), an mbarrier phase, and the release agents' sleeping wait on shared-memory
// counters. Printf-free and inlined: a call in a kernel that issues wgmma makes ptxas
// serialise them.
//
// A wait polls; once it has waited `budgets` x WaitContext::budget_ns of %globaltimer,
// report_and_abort fills the host-mapped WaitReport (the first waiter to time out claims
// it) and ends the kernel with a fault, so the host gets an error and one line naming
// the wait (sync/report.hpp) instead of a hang.
//
// Budgets by what a wait depends on. A stalled rank holds up waits on this rank's
// other CTAs, which hold up the waits inside a CTA, which hold up a release agent;
// each wait starts no earlier than the one that holds it up, so with longer budgets
// further down that chain the first wait to report is the one on the rank or CTA that
// stalled, not one it holds up (the timer's and the polls' jitter is microseconds,
// the gaps are whole budgets). A test relies on it: an absent peer must be reported
// by the wait for its rows.
#pragma once

#include <cstdint>

#include "xstage/hopper/mbarrier.cuh"
#include "xstage/sync/ptx.cuh"
#include "xstage/sync/report.hpp"

namespace xstage::sync {

inline constexpr uint32_t kPeerBudgets = 1;   // other ranks only: LSA barrier, rows or flags from peers
inline constexpr uint32_t kCtaBudgets = 2;    // this rank's CTAs too: start gate, row blocks, combine rows
inline constexpr uint32_t kInCtaBudgets = 3;  // mbarriers inside a CTA
inline constexpr uint32_t kAgentBudgets = 6;  // a release agent's idle wait (a consumer's wait + a tile)

// Waits inside a CTA (mbarriers, the agents' shared-memory counters) count SM clock
// cycles (two per ns: above the card's 1.98 GHz boost clock, so such a budget is never
// shorter than budget_ns and the order above holds). Their poll loops are the hot path of
// a waiting warp: its issue slots come out of the computing warps beside it, so the
// mbarrier wait keeps the shape of a plain try_wait loop: a second try right after the
// clock is read, and the budget loaded once, after it. Measured on the attention kernel
// (S = 16K-32K, 32 rows, one H200, over the kernel before the timeouts were shared):
// this form 1.019x; a deadline computed before the first retry 1.055x; the budget
// reloaded from the kernel parameters in every poll 1.06x (4 % more instructions).
inline constexpr unsigned long long kCyclesPerNs = 2;
__device__ __forceinline__ long long cycle_budget(const WaitContext& ctx, uint32_t budgets) {
  return static_cast<long long>(budgets * ctx.budget_ns * kCyclesPerNs);
}

// Ends the kernel with an error, without `trap`: a store to the unmapped page at
// address 0 (an illegal-address fault the host sees at its synchronisation), then sleeps
// until the fault takes the context down. A `trap` site holds ptxas to the kernel's
// entry register count in all the code around it, which undoes setmaxnreg: the fused
// MoE consumers were compiled into the entry's 168 registers and spilled.
[[noreturn]] __device__ __forceinline__ void abort_kernel() {
  asm volatile("st.global.relaxed.sys.u32 [%0], 1;" ::"l"(0ull) : "memory");
#pragma unroll 1
  while (true) asm volatile("nanosleep.u32 100000;");
}

// Fills the report (if it is the first to claim it) and ends the kernel.
template <class Site>
[[noreturn]] __device__ __forceinline__ void report_and_abort(const WaitContext& ctx, Site site, int index,
                                                              uint32_t expected, uint32_t seen) {
  WaitReport* r = ctx.report;
  if (r != nullptr && atomicCAS(&r->flag, 0, 2) == 0) {
    volatile WaitReport* v = r;
    v->kernel = ctx.kernel;
    v->site = static_cast<int>(site);
    v->rank = ctx.rank;
    v->block = static_cast<int>(blockIdx.x);
    v->thread = static_cast<int>(threadIdx.x);
    v->index = index;
    v->expected = expected;
    v->seen = seen;
    __threadfence_system();
    v->flag = 1;
    __threadfence_system();
  }
  abort_kernel();
}

// Spins until *counter >= expected (wrap-safe: counters only grow and are compared
// modulo 2^32), each load ld.acquire.sys; returns the value seen.
template <class Site>
__device__ __forceinline__ uint32_t wait_geq_acquire(const WaitContext& ctx, const uint32_t* counter,
                                                     uint32_t expected, Site site, int index,
                                                     uint32_t budgets = kPeerBudgets) {
  uint32_t seen = ld_acquire_sys(counter);
  if (static_cast<int32_t>(seen - expected) >= 0) return seen;
  const unsigned long long deadline = global_ns() + budgets * ctx.budget_ns;  // in a register (see above)
#pragma unroll 1
  while (true) {
    seen = ld_acquire_sys(counter);
    if (static_cast<int32_t>(seen - expected) >= 0) return seen;
    if (global_ns() > deadline) report_and_abort(ctx, site, index, expected, seen);
  }
}

// Until the phase with `parity` of mbarrier `bar` completed (acquire, CTA scope).
template <class Site>
__device__ __forceinline__ void wait_phase(const WaitContext& ctx, uint64_t* bar, uint32_t parity, Site site,
                                           int index, uint32_t budgets = kInCtaBudgets) {
  if (hopper::mbar_try_wait(bar, parity)) return;
  const long long start = clock64();
  if (hopper::mbar_try_wait(bar, parity)) return;
  const long long budget = cycle_budget(ctx, budgets);
#pragma unroll 1
  do {
    if (clock64() - start > budget) report_and_abort(ctx, site, index, parity, 0);
  } while (!hopper::mbar_try_wait(bar, parity));
}

// The release agents' wait (one lane of a producer warpgroup that fences and signals
// the tiles that the consumer warpgroups stored): returns the lowest of the kN
// shared-memory counters once it is past `released` (acquire, CTA scope). While none
// has moved it sleeps, 128 ns doubling up to kAgentMaxSleepNs, so that its loop takes
// few issue slots from the warps beside it; a larger cap costs up to one cap of
// latency on a launch's last release (a 2 us cap ran the fused QKV kernel 0.3-1.3 %
// slower, docs/xstage-ulysses.md "Decisions").
inline constexpr uint32_t kAgentMaxSleepNs = 256;
template <int kN, class Site>
__device__ __forceinline__ uint32_t agent_wait_past(const WaitContext& ctx, const uint32_t* counters,
                                                    uint32_t released, Site site, uint32_t budgets = kAgentBudgets) {
  uint32_t sleep_ns = 128;
  const long long deadline = clock64() + cycle_budget(ctx, budgets);
#pragma unroll 1
  while (true) {
    uint32_t done = smem_load_acquire(&counters[0]);
#pragma unroll
    for (int c = 1; c < kN; ++c) done = min(done, smem_load_acquire(&counters[c]));
    if (done != released) return done;
    if (clock64() > deadline) report_and_abort(ctx, site, -1, released + 1, done);
    __nanosleep(sleep_ns);
    sleep_ns = min(2 * sleep_ns, kAgentMaxSleepNs);
  }
}

}  // namespace xstage::sync
