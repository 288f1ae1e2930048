// Device side of the communication layer: flag signals and the cross-GPU barrier.
//
// Memory ordering protocol ("data is complete"):
//   sender : plain or bulk stores of the payload to the peer's window
//            -> signal_release(flag, v): fence.acq_rel.sys; st.relaxed.sys flag = v
//   receiver: sync::wait_geq_acquire(ctx, flag, v, ...): ld.acquire.sys until flag >= v
//            -> reads of the payload are ordered after the flag read.
// A release at system scope waits for the issuing thread's earlier stores (and, by
// cumulativity, those it observed through a CTA barrier) to be performed, so it must
// come after a __syncthreads() when other threads wrote the payload.
//
// Every wait has a budget (sync/wait.cuh): on timeout the waiting thread fills the
// host-mapped report of its WaitContext (rank, site, peer, expected, seen) and traps;
// the host sees cudaErrorLaunchFailure at its next sync and sync::take_report() (or the
// launcher's own report) names the wait.
#pragma once

#include <cuda/atomic>
#include <nccl_device.h>

#include <cstdint>

#include "xstage/sync/ptx.cuh"
#include "xstage/sync/wait.cuh"

namespace xstage::comm {

// Release a flag on a peer (or locally): all earlier stores of this thread, and
// of threads synchronised with it by a barrier, become visible before the flag.
__device__ __forceinline__ void signal_release(uint32_t* flag, uint32_t value) {
  sync::fence_acq_rel_sys();
  sync::st_relaxed_sys(flag, value);
}

// Cross-GPU barrier over the LSA team with a timeout. NCCL's barrier session does
// the arrive (release stores into each peer's inbox); the wait is ours so that it
// can give up and report `site` with the peer as index. Call with all threads of
// the block; uses barrier `index` (one per block, 0..lsaBarrierCount-1).
template <class Site>
__device__ __forceinline__ void lsa_barrier_sync(const ncclDevComm& dev, uint32_t index, const sync::WaitContext& ctx,
                                                 Site site, uint32_t budgets = sync::kPeerBudgets) {
  ncclCoopCta cta;
  ncclLsaBarrierSession<ncclCoopCta> bar(cta, dev, ncclTeamTagLsa{}, index);
  bar.arrive(cta, cuda::memory_order_release);
  for (int i = threadIdx.x; i < bar.team.nRanks - 1; i += blockDim.x) {
    const int peer = i + (bar.team.rank <= i ? 1 : 0);
    sync::wait_geq_acquire(ctx, bar.ucInbox(bar.team.rank, peer), bar.epoch + 1, site, peer, budgets);
  }
  bar.epoch += 1;
  __syncthreads();
}

}  // namespace xstage::comm
