// Adam with multi-tensor updates: the same algorithm, state and checkpoint format as
// torch::optim::Adam (L2 weight decay added to the gradient, bias-corrected moments), but
// each of the update's elementwise operations runs once over all parameters
// (at::_foreach_*) instead of once per parameter. LibTorch's Adam launches about nine
// kernels per parameter; the two-branch model has about a hundred parameters, so its
// optimizer step was close to a thousand tiny launches (PyTorch's own Adam takes the
// multi-tensor path on CUDA by default).
#pragma once

#include "gait/nets/torch.hpp"

namespace gait::train {

class MultiTensorAdam : public torch::optim::Adam {
 public:
  using torch::optim::Adam::Adam;
  // amsgrad and sparse gradients take torch::optim::Adam's per-parameter path.
  torch::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace gait::train
