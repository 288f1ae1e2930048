// The fused Ulysses kernel instantiation (attention kernel + remote-store
// epilogue), the receiver-complete wait and the LSA pointer query.
#include <nccl_device.h>

#include <cstdio>

#include "attention/sm90_flash_fwd_launch.cuh"
#include "sm90_ulysses_epilogue.cuh"
#include "ulysses_fused.hpp"
#include "xstage/check_cuda.hpp"
#include "xstage/comm_device.cuh"
#include "xstage/device_buffer.hpp"

namespace xstage::ulysses {

namespace {

__global__ void wait_sources_kernel(const uint32_t* counters, int ranks, SourceCounts expected, comm::WaitBudget b) {
  const int src = threadIdx.x;
  if (src >= ranks) return;
  const uint32_t* flag = counters + src;
  const uint32_t want = expected.v[src];
  const unsigned long long start = comm::global_ns();
#pragma unroll 1
  while (true) {
    const uint32_t seen = comm::load_acquire_sys(flag);
    if (static_cast<int32_t>(seen - want) >= 0) return;
    if (comm::global_ns() - start > b.timeout_ns) {
      printf("xstage device timeout: ulysses rank %d waited %.3f s for source rank %d's tiles (flag: slice counter "
             "%d at %p): expected >= %u, saw %u\n",
             b.rank, b.timeout_ns * 1e-9, src, src, flag, want, seen);
      __trap();
    }
  }
}

__global__ void lsa_pointers_kernel(ncclWindow_t window, std::size_t offset, int ranks, void** out) {
  for (int r = 0; r < ranks; ++r) out[r] = ncclGetLsaPointer(window, offset, r);
}

}  // namespace

void launch_fused_attention(const attention::FwdArgs& args, const attention::FwdConfig& cfg, const FusedTargets& t,
                            cudaStream_t stream) {
  const attention::Problem prob = attention::validate(args);
  XS_CHECK_MSG(t.geo.ranks >= 1 && t.geo.ranks <= kMaxRanks,
               "ulysses fused: the geometry's rank count must be 1..8 (fused_geometry sets it)");
  sm90::RemoteStoreParams epi{};
  for (int r = 0; r < kMaxRanks; ++r) {
    epi.out[r] = static_cast<__nv_bfloat16*>(t.out[r]);
    epi.counter[r] = t.counter[r];
  }
  epi.geo = t.geo;
  using attention::sm90::Signal;
  XS_CHECK_MSG(t.signal != FusedSignal::automatic, "ulysses fused: resolve FusedSignal::automatic before the launch");
  if (t.signal == FusedSignal::per_slice)
    attention::sm90::launch_flash_fwd<sm90::RemoteStoreEpilogue<Signal::per_slice>>(args, prob, cfg, epi, stream);
  else if (t.signal == FusedSignal::by_agent)
    attention::sm90::launch_flash_fwd<sm90::RemoteStoreEpilogue<Signal::by_agent>>(args, prob, cfg, epi, stream);
  else
    attention::sm90::launch_flash_fwd<sm90::RemoteStoreEpilogue<Signal::at_exit>>(args, prob, cfg, epi, stream);
}

void launch_wait_sources(const uint32_t* counters, int ranks, const SourceCounts& expected, comm::WaitBudget budget,
                         cudaStream_t stream) {
  wait_sources_kernel<<<1, 32, 0, stream>>>(counters, ranks, expected, budget);
  XS_CHECK_LAUNCH();
}

void lsa_pointers(ncclWindow_t window, std::size_t offset, int ranks, void** out) {
  DeviceBuffer<void*> d(kMaxRanks);
  lsa_pointers_kernel<<<1, 1>>>(window, offset, ranks, d.get());
  XS_CHECK_LAUNCH();
  XS_CHECK_CUDA(cudaDeviceSynchronize());
  XS_CHECK_CUDA(cudaMemcpy(out, d.get(), ranks * sizeof(void*), cudaMemcpyDeviceToHost));
}

}  // namespace xstage::ulysses
