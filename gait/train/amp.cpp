#include "gait/train/amp.hpp"

#include <ATen/autocast_mode.h>

#include "common/check.hpp"

// LibTorch >= 2.4 takes the device type; older releases have CUDA-only calls.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define GAIT_AUTOCAST_BY_DEVICE 1
#else
#define GAIT_AUTOCAST_BY_DEVICE 0
#endif

namespace gait::train {

AutocastGuard::AutocastGuard(bool enable) {
  if (!enable || !torch::cuda::is_available()) return;
  active_ = true;
#if GAIT_AUTOCAST_BY_DEVICE
  at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
  at::autocast::set_autocast_enabled(at::kCUDA, true);
#else
  at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
  at::autocast::set_enabled(true);
#endif
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
#if GAIT_AUTOCAST_BY_DEVICE
  at::autocast::set_autocast_enabled(at::kCUDA, false);
#else
  at::autocast::set_enabled(false);
#endif
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
}

torch::Device resolve_device(const std::string& name) {
  if (name == "cpu") return torch::kCPU;
  const bool cuda = torch::cuda::is_available();
  if (name == "cuda") {
    XS_ASSERT(cuda, "device 'cuda' requested but LibTorch sees no CUDA device (a CPU-only build, or no GPU)");
    return torch::kCUDA;
  }
  XS_ASSERT(name == "auto", "unknown device '{}' (auto, cpu, cuda)", name);
  return cuda ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
}

}  // namespace gait::train
