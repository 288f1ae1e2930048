// Adam with multi-tensor updates: the same algorithm, state and checkpoint format as
// torch::optim::Adam (L2 weight decay added to the gradient, bias-corrected moments), but
// each of the update's elementwise operations runs once over all parameters
// (at::_foreach_*) instead of once per parameter. LibTorch's Adam launches about nine
// kernels per parameter; the two-branch model has about a hundred parameters, so its
// optimizer step was close to a thousand tiny launches (PyTorch's own Adam takes the
// multi-tensor path on CUDA by default).
#pragma once

#include <vector>

#include "gait/nets/torch.hpp"

namespace gait::train {

class MultiTensorAdam : public torch::optim::Adam {
 public:
  using torch::optim::Adam::Adam;
  // amsgrad and sparse gradients take torch::optim::Adam's per-parameter path.
  torch::Tensor step(LossClosure closure = nullptr) override;

  // step() in two halves, for a training step captured as a CUDA graph (graph_step.hpp).
  // advance() is the host's half: it creates missing state, counts the step and writes
  // this step's learning rate and bias corrections into one small tensor per group on
  // the parameters' device. update() is the device's half and reads those scalars there,
  // so one captured update() serves every later step. Both need every parameter of a
  // group to have a gradient (a captured step's gradients stay allocated) and the
  // group's parameters to share one step count; amsgrad is not supported.
  void advance();
  void update();

 private:
  std::vector<torch::Tensor> scalars_;  // per group: {1 / sqrt(bc2), -bc1 / lr}
};

}  // namespace gait::train
