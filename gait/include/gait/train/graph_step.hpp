// A training step as CUDA graphs: the step's device work (gradients zeroed, forward,
// loss, backward, the optimizer's device half) captured once and replayed every step, so
// a step costs one graph launch instead of the thousands of small kernel launches the
// host issues eagerly (the GCN branch's small tensors leave the GPU waiting on the host).
//
// What differs between steps stays outside the graph: the batch is copied into static
// input tensors before each replay, the learning rate and Adam's bias corrections are
// written to device scalars by MultiTensorAdam::advance(), and the step's loss terms are
// read from the graph's static output after it. One graph per FusionDrop value, captured
// the first time that value comes up: the modality drop is a host-side choice that
// changes the forward pass.
//
// Requirements, checked where they can be: LibTorch built with CUDA (available()), a
// step function whose shapes never change and that neither syncs nor copies from the host
// (it runs once under capture), gradients allocated before the first capture (the trainer
// runs its first steps eagerly, which also lets cuDNN's autotuning finish outside the graph).
#pragma once

#include <functional>
#include <memory>

#include "gait/nets/gait_net.hpp"

namespace gait::train {

class GraphStep {
 public:
  // The step's device work on static inputs (sil, pose, labels; undefined where the model
  // reads none) for one modality drop: returns the packed loss terms (LossTerms::packed).
  using StepFn = std::function<torch::Tensor(const torch::Tensor& sil, const torch::Tensor& pose,
                                             const torch::Tensor& labels, nets::FusionDrop drop)>;

  // Whether this build can capture CUDA graphs (LibTorch with CUDA) and a device is there.
  static bool available();

  GraphStep(StepFn fn, torch::Device device);
  ~GraphStep();
  GraphStep(const GraphStep&) = delete;
  GraphStep& operator=(const GraphStep&) = delete;

  // One step on this batch (host tensors, pinned for asynchronous copies): copies it into
  // the static inputs, captures the graph for `drop` if it is new, replays it. Returns the
  // packed loss terms on the device (valid until the next run()).
  torch::Tensor run(const torch::Tensor& sil, const torch::Tensor& pose, const torch::Tensor& labels,
                    nets::FusionDrop drop);
  int graphs() const;  // captured so far

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gait::train
