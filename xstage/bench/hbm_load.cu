// A load that streams HBM (a copy between two device buffers, over and over) until a flag
// in device memory is set or its time is up: the condition under which measure_copy_costs
// times the copy engine's per-operation cost for drains whose copies run while kernels
// stream their operands from HBM (the MoE mainloops; an idle GPU understates that cost).
#include "hbm_load.hpp"

#include <cstdint>

#include "common/cuda_check.hpp"
#include "xstage/sync/ptx.cuh"

namespace xstage::bench {
namespace {

__global__ void hbm_stream(const uint4* src, uint4* dst, std::size_t n, const volatile unsigned* stop,
                           unsigned long long until_ns) {
  const std::size_t first = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t step = std::size_t(gridDim.x) * blockDim.x;
  // The flag is read once per pass (an L2 hit), and the time bounds the kernel should
  // the flag never come (a stream that failed before writing it).
  while (*stop == 0 && sync::global_ns() < until_ns) {
    for (std::size_t i = first; i < n; i += step) {
      uint4 v = src[i];
      v.x += 1;
      dst[i] = v;
    }
  }
}

__global__ void read_global_ns(unsigned long long* out) { *out = sync::global_ns(); }

}  // namespace

HbmLoad::HbmLoad(std::size_t bytes) : src_(bytes / 16), dst_(bytes / 16), stop_(1), now_(1) {
  fill_device(src_.get(), 0, src_.size() * sizeof(uint4));
  XS_CHECK_CUDA(cudaDeviceSynchronize());
}

void HbmLoad::start(cudaStream_t stream, double max_s) {
  int sms = 0, device = 0;
  XS_CHECK_CUDA(cudaGetDevice(&device));
  XS_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  // The GPU's clock now, so that the load ends max_s after it starts at the latest.
  read_global_ns<<<1, 1, 0, stream>>>(now_.get());
  XS_CHECK_LAUNCH();
  unsigned long long now = 0;
  XS_CHECK_CUDA(cudaMemcpyAsync(&now, now_.get(), sizeof(now), cudaMemcpyDeviceToHost, stream));
  XS_CHECK_CUDA(cudaStreamSynchronize(stream));
  fill_device(stop_.get(), 0, sizeof(unsigned));
  XS_CHECK_CUDA(cudaDeviceSynchronize());
  // Two CTAs of 512 threads per SM: about 3.9 TB/s of copy traffic on H200.
  hbm_stream<<<2 * sms, 512, 0, stream>>>(src_.get(), dst_.get(), src_.size(), stop_.get(),
                                          now + static_cast<unsigned long long>(max_s * 1e9));
  XS_CHECK_LAUNCH();
}

void HbmLoad::stop_after(cudaStream_t stream) { common::stream_write(stream, stop_.get(), 1); }

}  // namespace xstage::bench
