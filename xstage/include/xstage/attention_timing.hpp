// Median per-launch time of an attention-kernel launch on the current stream 0,
// CUDA events around back-to-back launches, with bench_timing.hpp's sampling
// policy. A launch that fails (a device wait that timed out, a trap) is reported
// with the kernel's own explanation (explain_device_failure). CUDA builds only.
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "common/check.hpp"
#include "xstage/attention_cuda.hpp"
#include "xstage/bench_timing.hpp"
#include "xstage/check_cuda.hpp"

namespace xstage::attention {

template <class F>
double time_median_ms(F&& launch, int warmup, int reps, double budget_ms, cudaStream_t stream = nullptr) {
  cudaEvent_t e0, e1;
  XS_CHECK_CUDA(cudaEventCreate(&e0));
  XS_CHECK_CUDA(cudaEventCreate(&e1));
  auto timed = [&](int n) {
    XS_CHECK_CUDA(cudaEventRecord(e0, stream));
    for (int i = 0; i < n; ++i) launch();
    XS_CHECK_CUDA(cudaEventRecord(e1, stream));
    const cudaError_t err = cudaEventSynchronize(e1);
    if (err != cudaSuccess) {
      const std::string why = explain_device_failure();
      XS_FAIL("attention kernel failed: {}{}", cudaGetErrorString(err), why.empty() ? "" : "; " + why);
    }
    float t = 0;
    XS_CHECK_CUDA(cudaEventElapsedTime(&t, e0, e1));
    return static_cast<double>(t);
  };
  const std::vector<double> ms = sample_launch_ms(timed, warmup, reps, budget_ms);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return median_of_sorted(ms);
}

}  // namespace xstage::attention
