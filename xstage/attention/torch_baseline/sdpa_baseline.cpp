#include "sdpa_baseline.hpp"

#include "xstage/bench/timing.hpp"

#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace xstage::attention::baseline {

namespace {

torch::Tensor wrap(const Tensor4& t) {
  auto opts = torch::TensorOptions().dtype(torch::kBFloat16).device(torch::kCUDA);
  return torch::from_blob(t.data, {t.B, t.S, t.H, t.D}, {t.stride_b, t.stride_s, t.stride_h, t.stride_d}, opts);
}

struct BackendScope {  // enables exactly one SDPA backend, restores on exit
  bool flash, mem, math, cudnn;
  explicit BackendScope(const std::string& backend) {
    auto& ctx = at::globalContext();
    flash = ctx.userEnabledFlashSDP();
    mem = ctx.userEnabledMemEfficientSDP();
    math = ctx.userEnabledMathSDP();
    cudnn = ctx.userEnabledCuDNNSDP();
    ctx.setSDPUseFlash(backend == "flash");
    ctx.setSDPUseMemEfficient(false);
    ctx.setSDPUseMath(false);
    ctx.setSDPUseCuDNN(backend == "cudnn");
  }
  ~BackendScope() {
    auto& ctx = at::globalContext();
    ctx.setSDPUseFlash(flash);
    ctx.setSDPUseMemEfficient(mem);
    ctx.setSDPUseMath(math);
    ctx.setSDPUseCuDNN(cudnn);
  }
};

}  // namespace

SdpaResult time_sdpa(const std::string& backend, const FwdArgs& a, int warmup, int reps, double budget_ms,
                     bool copy_out) {
  SdpaResult r;
  r.torch_version = TORCH_VERSION;
  if (backend != "flash" && backend != "cudnn") {
    r.error = "unknown SDPA backend '" + backend + "' (flash, cudnn)";
    return r;
  }
  try {
    BackendScope scope(backend);
    torch::NoGradGuard no_grad;
    const auto q = wrap(a.q).transpose(1, 2);  // [B, H, S, D] views
    const auto k = wrap(a.k).transpose(1, 2);
    const auto v = wrap(a.v).transpose(1, 2);
    const std::optional<double> scale =
        a.softmax_scale > 0 ? std::optional<double>(a.softmax_scale) : std::optional<double>();
    auto run = [&] { return at::scaled_dot_product_attention(q, k, v, {}, 0.0, a.causal, scale); };
    const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
    torch::Tensor out;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    auto timed = [&](int n) {
      cudaEventRecord(e0, stream);
      for (int i = 0; i < n; ++i) out = run();
      cudaEventRecord(e1, stream);
      cudaEventSynchronize(e1);
      float t = 0;
      cudaEventElapsedTime(&t, e0, e1);
      return static_cast<double>(t);
    };
    const std::vector<double> ms = xstage::sample_launch_ms(timed, warmup, reps, budget_ms);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (copy_out) wrap(a.o).copy_(out.transpose(1, 2));
    const cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess) {
      r.error = std::string("CUDA error after SDPA: ") + cudaGetErrorString(err);
      return r;
    }
    r.median_ms = xstage::median_of_sorted(ms);
    r.runs = static_cast<int>(ms.size());
    r.ok = true;
  } catch (const std::exception& e) {
    r.error = e.what();
    const auto nl = r.error.find('\n');
    if (nl != std::string::npos) r.error.resize(nl);
  }
  return r;
}

}  // namespace xstage::attention::baseline
