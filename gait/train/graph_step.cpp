#include "gait/train/graph_step.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>

#include "common/check.hpp"

#if GAIT_TORCH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace gait::train {

#if GAIT_TORCH_CUDA

struct GraphStep::Impl {
  StepFn fn;
  torch::Device device;
  torch::Tensor sil, pose, labels;  // the static inputs every graph reads
  struct Captured {
    std::unique_ptr<at::cuda::CUDAGraph> graph;
    torch::Tensor packed;  // the graph's static output
  };
  std::array<Captured, 3> by_drop;  // indexed by FusionDrop

  // This batch's tensor into its static slot (allocated at the first batch).
  void stage(const torch::Tensor& host, torch::Tensor& slot, const char* what) {
    if (!host.defined()) return;
    if (!slot.defined()) slot = torch::empty(host.sizes(), host.options().device(device).pinned_memory(false));
    XS_ASSERT(slot.sizes() == host.sizes() && slot.scalar_type() == host.scalar_type(),
              "CUDA graph step: the {} batch is [{}], the captured step's is [{}] (a graph replays one shape; set "
              "trainer.cuda_graph false for batches that change shape)",
              what, fmt::join(host.sizes(), ", "), fmt::join(slot.sizes(), ", "));
    slot.copy_(host, /*non_blocking=*/true);
  }

  // The step on a side stream under capture (a graph cannot be captured on the default
  // stream), ordered after the work already queued and before the work that follows.
  void capture(Captured& c, nets::FusionDrop drop) {
    const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(device.index());
    const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index());
    at::cuda::CUDAEvent queued, captured;
    queued.record(current);
    queued.block(side);
    {
      c10::cuda::CUDAStreamGuard on_side(side);
      c.graph = std::make_unique<at::cuda::CUDAGraph>();
#if TORCH_VERSION_MAJOR >= 2
      // Thread-local: the batch-preparing thread may allocate pinned memory meanwhile.
      c.graph->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
#else
      c.graph->capture_begin();
#endif
      try {
        c.packed = fn(sil, pose, labels, drop);
      } catch (...) {
        try {
          c.graph->capture_end();
        } catch (...) {  // the step's own error is the one to report
        }
        c.graph.reset();
        throw;
      }
      c.graph->capture_end();
    }
    captured.record(side);
    captured.block(current);
  }
};

bool GraphStep::available() { return torch::cuda::is_available(); }

GraphStep::GraphStep(StepFn fn, torch::Device device) : impl_(new Impl{std::move(fn), device, {}, {}, {}, {}}) {
  XS_ASSERT(device.is_cuda() && available(), "CUDA graph step on {}: it needs a CUDA device", device.str());
}

torch::Tensor GraphStep::run(const torch::Tensor& sil, const torch::Tensor& pose, const torch::Tensor& labels,
                             nets::FusionDrop drop) {
  Impl& m = *impl_;
  m.stage(sil, m.sil, "silhouette");
  m.stage(pose, m.pose, "pose");
  m.stage(labels, m.labels, "label");
  Impl::Captured& c = m.by_drop.at(static_cast<std::size_t>(drop));
  if (!c.graph) m.capture(c, drop);
  c.graph->replay();
  return c.packed;
}

int GraphStep::graphs() const {
  int n = 0;
  for (const auto& c : impl_->by_drop) n += c.graph != nullptr;
  return n;
}

#else  // LibTorch without CUDA

struct GraphStep::Impl {};

bool GraphStep::available() { return false; }

GraphStep::GraphStep(StepFn, torch::Device device) {
  XS_ASSERT(false, "CUDA graph step on {}: this build's LibTorch has no CUDA", device.str());
}

torch::Tensor GraphStep::run(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, nets::FusionDrop) {
  return {};
}

int GraphStep::graphs() const { return 0; }

#endif

GraphStep::~GraphStep() = default;

}  // namespace gait::train
