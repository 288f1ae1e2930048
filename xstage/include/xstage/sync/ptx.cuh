// The memory-ordering instructions the kernels use, each defined once.
//
// Cross-GPU and cross-CTA protocol ("the data is complete"):
//   writer  plain / 16-byte stores of the payload (by any threads of the CTA), a CTA
//           barrier, then one thread: fence_acq_rel_sys(); red_add_relaxed_sys or
//           st_relaxed_sys on the flag. The fence is cumulative: it orders the stores
//           that the thread observed through the barrier too, so the flag never
//           overtakes them.
//   reader  ld_acquire_sys of the flag until it is past the target (sync/wait.cuh);
//           later reads see the payload. A TMA read of it needs
//           fence_proxy_async_global() after the acquire (the generic and async
//           proxies are ordered only by that fence); so does a writer whose data a
//           TMA load will read, before it releases.
// Inside a CTA, counters in shared memory: smem_add_release / smem_load_acquire.
#pragma once

#include <cstdint>

namespace xstage::sync {

// %globaltimer: ns, the same clock on every SM of a GPU (budgets of the waits).
__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ void fence_acq_rel_sys() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }

// Orders this thread's generic-proxy global accesses with its async-proxy (TMA) ones.
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;" ::: "memory"); }
// The same for shared memory: generic writes before wgmma / TMA reads of them.
__device__ __forceinline__ void fence_proxy_async_smem() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

__device__ __forceinline__ uint32_t ld_acquire_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_relaxed_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void st_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// Counter adds at system scope: relaxed (after a fence_acq_rel_sys that covers a
// batch of them), or release (a fence of its own).
__device__ __forceinline__ void red_add_relaxed_sys(uint32_t* p, uint32_t v) {
  asm volatile("red.relaxed.sys.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void red_add_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("red.release.sys.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// Counters in shared memory between the warps of one CTA: what the adding thread
// wrote or observed before the add happens before any acquire load that sees the sum.
__device__ __forceinline__ void smem_add_release(uint32_t* counter, uint32_t v) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(counter));
  asm volatile("red.release.cta.shared::cta.add.u32 [%0], %1;" ::"r"(a), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t smem_load_acquire(const uint32_t* counter) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(counter));
  uint32_t v;
  asm volatile("ld.acquire.cta.shared::cta.u32 %0, [%1];" : "=r"(v) : "r"(a) : "memory");
  return v;
}

}  // namespace xstage::sync
