// Automatic mixed precision on CUDA: bf16 autocast for the forward pass (H100/H200
// have bf16 tensor cores and bf16 keeps fp32's range, so no loss scaling is needed).
// On CPU the guard does nothing. The autocast API moved between LibTorch 1.13
// (set_enabled) and 2.4+ (set_autocast_enabled(device, ...)); amp.cpp picks by version.
#pragma once

#include "gait/nets/torch.hpp"

namespace gait::train {

class AutocastGuard {
 public:
  explicit AutocastGuard(bool enable);  // enable: only honoured on a CUDA build
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool active_ = false;
};

// "auto" -> CUDA when available, else CPU; "cuda" without a GPU is an error.
torch::Device resolve_device(const std::string& name);

}  // namespace gait::train
