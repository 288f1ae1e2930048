// CUDA-event timing of attention-kernel launches, shared by `xstage bench attention`
// and `xstage bench ulysses --kernel-only`. A launch that fails (a device wait that
// timed out, a trap) is reported with the kernel's own explanation
// (explain_device_failure). CUDA builds only.
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "common/check.hpp"
#include "xstage/attention_cuda.hpp"
#include "xstage/bench_timing.hpp"
#include "xstage/check_cuda.hpp"

namespace xstage::attention {

// Milliseconds of n back-to-back launches on `stream`, between two events.
class EventTimer {
 public:
  EventTimer() {
    XS_CHECK_CUDA(cudaEventCreate(&e0_));
    XS_CHECK_CUDA(cudaEventCreate(&e1_));
  }
  ~EventTimer() {
    cudaEventDestroy(e0_);
    cudaEventDestroy(e1_);
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  template <class F>
  double operator()(F&& launch, int n, cudaStream_t stream = nullptr) {
    XS_CHECK_CUDA(cudaEventRecord(e0_, stream));
    for (int i = 0; i < n; ++i) launch();
    XS_CHECK_CUDA(cudaEventRecord(e1_, stream));
    const cudaError_t err = cudaEventSynchronize(e1_);
    if (err != cudaSuccess) {
      const std::string why = explain_device_failure();
      XS_FAIL("attention kernel failed: {}{}", cudaGetErrorString(err), why.empty() ? "" : "; " + why);
    }
    float t = 0;
    XS_CHECK_CUDA(cudaEventElapsedTime(&t, e0_, e1_));
    return static_cast<double>(t);
  }

 private:
  cudaEvent_t e0_ = nullptr, e1_ = nullptr;
};

// Median per-launch time with bench_timing.hpp's sampling policy.
template <class F>
double time_median_ms(F&& launch, int warmup, int reps, double budget_ms, cudaStream_t stream = nullptr) {
  EventTimer timer;
  const std::vector<double> ms =
      sample_launch_ms([&](int n) { return timer(launch, n, stream); }, warmup, reps, budget_ms);
  return median_of_sorted(ms);
}

}  // namespace xstage::attention
