// The fused Ulysses kernel instantiation (attention kernel + remote-store
// epilogue), the receiver-complete wait and the LSA pointer query.
#include <nccl_device.h>

#include <iterator>

#include "xstage/attention/sm90_flash_fwd_launch.cuh"
#include "sm90_ulysses_epilogue.cuh"
#include "xstage/ulysses/ulysses_fused.hpp"
#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "xstage/sync/wait.cuh"

namespace xstage::ulysses {

namespace {

// The receiver's wait sites (sync::WaitReport::site).
enum class UlyssesSite : int { source_slices };
constexpr const char* kUlyssesSiteNames[] = {
    "source rank {index}'s tiles (flag: slice counter {index} of this owner; expected = what that source has "
    "signalled so far)"};
constexpr sync::SiteNames kUlyssesSites{sync::Kernel::ulysses, "ulysses", kUlyssesSiteNames,
                                       static_cast<int>(std::size(kUlyssesSiteNames))};

// One thread per source rank: acquire its counter >= the cumulative count it has signalled.
__global__ void wait_sources_kernel(const uint32_t* counters, int ranks, SourceCounts expected,
                                    sync::WaitContext wait) {
  const int src = threadIdx.x;
  if (src >= ranks) return;
  sync::wait_geq_acquire(wait, counters + src, expected.v[src], UlyssesSite::source_slices, src, sync::kPeerBudgets);
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
  XS_CHECK_MSG(t.geo.chunk_rows == 0 || (t.signal != FusedSignal::per_cta && t.geo.chunk_rows % 128 == 0 &&
                                         t.geo.rows_per_rank % t.geo.chunk_rows == 0),
               "ulysses fused: chunked counters need per_slice or by_agent signals and chunks of whole 128-row "
               "tiles that divide an owner's rows");
  const int rank = t.geo.head0 / static_cast<int>(prob.H);  // rank r computes heads r·H/P .. (H/P per rank)
  if (t.signal == FusedSignal::per_slice)
    attention::sm90::launch_flash_fwd<sm90::RemoteStoreEpilogue<Signal::per_slice>>(args, prob, cfg, epi, stream,
                                                                                     rank);
  else if (t.signal == FusedSignal::by_agent)
    attention::sm90::launch_flash_fwd<sm90::RemoteStoreEpilogue<Signal::by_agent>>(args, prob, cfg, epi, stream,
                                                                                    rank);
  else
    attention::sm90::launch_flash_fwd<sm90::RemoteStoreEpilogue<Signal::at_exit>>(args, prob, cfg, epi, stream, rank);
}

void launch_wait_sources(const uint32_t* counters, int ranks, const SourceCounts& expected, sync::WaitContext wait,
                         cudaStream_t stream) {
  sync::register_sites(kUlyssesSites);
  wait.kernel = static_cast<int>(sync::Kernel::ulysses);
  wait.report = sync::process_report().device();
  wait_sources_kernel<<<1, 32, 0, stream>>>(counters, ranks, expected, wait);
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
