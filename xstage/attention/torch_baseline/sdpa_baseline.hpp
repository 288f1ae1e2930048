// PyTorch SDPA baselines for `xstage bench attention`, through LibTorch, in a
// shared library of their own (built with XSTAGE_TORCH_BASELINES=ON). Only
// plain types cross this header: no LibTorch include reaches its users.
#pragma once

#include <string>

#include "xstage/attention/attention.hpp"

namespace xstage::attention::baseline {

struct SdpaResult {
  bool ok = false;
  double median_ms = 0;   // median of the timed runs (CUDA events)
  int runs = 0;
  std::string error;      // why it did not run (backend refused the shape, ...)
  std::string torch_version;
};

// Times torch::scaled_dot_product_attention with only `backend` enabled
// ("flash" or "cudnn") on the bf16 [B, S, H, D] tensors of `a` (wrapped, not
// copied; passed to SDPA as [B, H, S, D] views). Warm-up runs first. A sample
// is `inner` back-to-back runs between two CUDA events (inner chosen from the
// warm-up so a sample lasts >= 2 ms and launch gaps hide behind the queue);
// samples are taken until `reps` or `budget_ms` of GPU time (at least 3; 2 when
// one run takes >= 50 ms), and
// median_ms is the median per-run time. If copy_out, SDPA's output of the last
// run is written into a.o.
SdpaResult time_sdpa(const std::string& backend, const FwdArgs& a, int warmup, int reps, double budget_ms,
                     bool copy_out);

}  // namespace xstage::attention::baseline
