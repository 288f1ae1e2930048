// CUDA-event timing of the benches (header-only, CUDA builds): the GPU time of n
// back-to-back launches between two events on one stream, and the median of the
// samples that bench/timing.hpp's policy takes. A launch that fails (a device wait
// that timed out, a trap) is reported with the kernel's own explanation, so a bench
// fails with one line naming the wait instead of a bare CUDA error.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <string>
#include <vector>

#include "common/check.hpp"
#include "common/cuda_check.hpp"
#include "xstage/bench/timing.hpp"

namespace xstage::bench {

// After a failed synchronisation: what the kernel reported ("" if nothing), e.g.
// attention::explain_device_failure or ulysses::qkv_explain_failure.
using Explain = std::function<std::string()>;

class EventTimer {
 public:
  explicit EventTimer(cudaStream_t stream = nullptr, std::string what = "kernel", Explain explain = {})
      : stream_(stream), what_(std::move(what)), explain_(std::move(explain)) {
    XS_CHECK_CUDA(cudaEventCreate(&e0_));
    XS_CHECK_CUDA(cudaEventCreate(&e1_));
  }
  ~EventTimer() {
    cudaEventDestroy(e0_);
    cudaEventDestroy(e1_);
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  // Milliseconds of n back-to-back launch() calls.
  template <class F>
  double operator()(F&& launch, int n) {
    return timed(launch, n, [&] { wait_end(); });
  }
  // The same, ended by the caller's own wait (e.g. one that names a timed-out device wait
  // or synchronises more than the stream); the end event is complete once wait() returns.
  template <class F, class W>
  double timed(F&& launch, int n, W&& wait) {
    XS_CHECK_CUDA(cudaEventRecord(e0_, stream_));
    for (int i = 0; i < n; ++i) launch();
    XS_CHECK_CUDA(cudaEventRecord(e1_, stream_));
    wait();
    float t = 0;
    XS_CHECK_CUDA(cudaEventElapsedTime(&t, e0_, e1_));
    return static_cast<double>(t);
  }
  // The start event of the launches being timed: work on other streams that the timed
  // time must hold waits for it (and its end joins the timer's stream inside launch()).
  cudaEvent_t start() const { return e0_; }

 private:
  void wait_end() {
    const cudaError_t err = cudaEventSynchronize(e1_);
    if (err == cudaSuccess) return;
    const std::string why = explain_ ? explain_() : std::string();
    XS_FAIL("{} failed: {}{}", what_, cudaGetErrorString(err), why.empty() ? "" : "; " + why);
  }
  cudaStream_t stream_;
  std::string what_;
  Explain explain_;
  cudaEvent_t e0_ = nullptr, e1_ = nullptr;
};

// Median per-launch time with timing.hpp's sampling policy (warm-up, batches of ~2 ms,
// up to `reps` samples or `budget_ms`).
template <class F>
double time_median_ms(EventTimer& timer, F&& launch, int warmup, int reps, double budget_ms) {
  const std::vector<double> ms =
      sample_launch_ms([&](int n) { return timer(launch, n); }, warmup, reps, budget_ms);
  return median_of_sorted(ms);
}

// Medians of several variants sampled in turns (timing.hpp: sample_interleaved_ms).
inline std::vector<double> medians_in_turns(std::vector<std::function<double(int)>>& timed, int warmup, int reps) {
  std::vector<double> med;
  for (const auto& ms : sample_interleaved_ms(timed, warmup, reps)) med.push_back(median_of_sorted(ms));
  return med;
}

// The same for plain launches, each timed with `timer` (on its stream).
inline std::vector<double> launch_medians_in_turns(EventTimer& timer, const std::vector<std::function<void()>>& launches,
                                                   int warmup, int reps) {
  std::vector<std::function<double(int)>> timed;
  for (const auto& launch : launches) timed.push_back([&timer, &launch](int n) { return timer(launch, n); });
  return medians_in_turns(timed, warmup, reps);
}

// n elements of device memory on the host (the caller synchronised the writer).
template <class T>
std::vector<T> to_host(const T* device, std::size_t n) {
  std::vector<T> h(n);
  if (n) XS_CHECK_CUDA(cudaMemcpy(h.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

}  // namespace xstage::bench
