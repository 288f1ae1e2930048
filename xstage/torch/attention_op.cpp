// torch.ops.xstage.attention: the sm_90a flash-attention forward on Hopper, a reference
// elsewhere (the fp64 CPU reference of xstage/attention on the CPU, fp32 torch
// operators on other GPUs), one argument contract for all.
#include <c10/util/Exception.h>
#include <torch/version.h>

#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "checks.hpp"
#include "ops.hpp"
#include "xstage/attention/attention.hpp"

#if XSTAGE_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "xstage/attention/attention_cuda.hpp"
#endif

namespace xstage::torch_ops {

namespace {
constexpr const char* kOp = "xstage.attention";

std::vector<float> to_floats(const at::Tensor& t) {
  const at::Tensor f = t.to(at::kFloat).contiguous();
  const float* p = f.data_ptr<float>();
  return std::vector<float>(p, p + f.numel());
}

at::Tensor from_doubles(const std::vector<double>& v, at::IntArrayRef shape, at::ScalarType dtype) {
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(at::kDouble));
  std::memcpy(t.data_ptr<double>(), v.data(), v.size() * sizeof(double));
  return t.to(dtype);
}
}  // namespace

AttnShape check_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const c10::optional<double>& scale) {
  const Arg aq{kOp, "q", q}, ak{kOp, "k", k}, av{kOp, "v", v};
  for (const Arg* a : {&aq, &ak, &av}) {
    TORCH_CHECK_VALUE(a->t.defined(), kOp, ": ", a->name, " is an undefined tensor");
    check_dims(*a, 4, "[B, S, H, D]");
    check_dtype(*a, at::kBFloat16);
    check_same_device(*a, aq);
    TORCH_CHECK_VALUE(a->t.numel() > 0, kOp, ": ", a->name, " must not be empty, got shape ", a->t.sizes());
    // The kernel reads rows of D elements with TMA: the head dimension must be dense.
    TORCH_CHECK_VALUE(a->t.stride(3) == 1, kOp, ": ", a->name, " must be contiguous in its last dimension (D), got ",
                      "strides ", a->t.strides(), "; call .contiguous()");
  }
  AttnShape s{q.size(0), q.size(1), k.size(1), q.size(2), q.size(3), 0};
  for (const Arg* a : {&ak, &av}) {
    check_size(*a, 0, s.B, "B of q");
    check_size(*a, 2, s.H, "H of q");
    check_size(*a, 3, s.D, "D of q");
  }
  check_size(av, 1, s.Skv, "S of k");
  TORCH_CHECK_VALUE(s.D == 64 || s.D == 128, kOp, ": q has head dimension D = ", s.D, " (shape ", q.sizes(),
                    "); the kernel takes D = 64 or 128");
  if (scale.has_value()) {
    TORCH_CHECK_VALUE(std::isfinite(*scale) && *scale > 0, kOp, ": scale must be a finite positive number, got ",
                      *scale);
    s.scale = *scale;
  } else {
    s.scale = 1.0 / std::sqrt(double(s.D));
  }
  return s;
}

AttnResult attention_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                         c10::optional<double> scale) {
  const AttnShape s = check_attention(q, k, v, scale);
  const attention::RefResult r = translate_errors(kOp, [&] {
    return attention::reference_fwd(to_floats(q), to_floats(k), to_floats(v), s.B, s.Sq, s.Skv, s.H, s.D, causal,
                                    s.scale);
  });
  return {from_doubles(r.o, {s.B, s.Sq, s.H, s.D}, at::kBFloat16), from_doubles(r.lse, {s.B, s.H, s.Sq}, at::kFloat)};
}

AttnResult attention_torch_reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const AttnShape& s, bool causal) {
  const at::Tensor qf = q.to(at::kFloat).transpose(1, 2);  // [B, H, S, D]
  const at::Tensor kf = k.to(at::kFloat).transpose(1, 2);
  const at::Tensor vf = v.to(at::kFloat).transpose(1, 2);
  at::Tensor scores = at::matmul(qf, kf.transpose(-2, -1)).mul_(s.scale);  // [B, H, Sq, Skv]
  if (causal) {  // bottom-right aligned: query i sees keys j <= i + (Skv - Sq)
    const auto idx = at::TensorOptions().dtype(at::kLong).device(q.device());
    const at::Tensor i = at::arange(s.Sq, idx).unsqueeze(1);
    const at::Tensor j = at::arange(s.Skv, idx).unsqueeze(0);
    scores.masked_fill_(j > i + (s.Skv - s.Sq), -std::numeric_limits<float>::infinity());
  }
  const at::Tensor lse = at::logsumexp(scores, -1);  // -inf where a row sees no key
  at::Tensor p = at::exp(scores - lse.unsqueeze(-1));
  p.masked_fill_(at::isinf(lse).unsqueeze(-1), 0);  // such rows give O = 0, as the kernel's
  const at::Tensor o = at::matmul(p, vf).transpose(1, 2).to(at::kBFloat16).contiguous();
  return {o, lse.contiguous()};
}

AttnResult attention_meta(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                          c10::optional<double> scale) {
#if TORCH_VERSION_MAJOR >= 2
  // Under torch.compile's dynamic shapes the sizes are symbolic: the checks that need a
  // concrete size run when the real kernel is called; here only rank and dtype.
  for (const Arg& a : {Arg{kOp, "q", q}, Arg{kOp, "k", k}, Arg{kOp, "v", v}}) {
    check_dims(a, 4, "[B, S, H, D]");
    check_dtype(a, at::kBFloat16);
  }
  const auto qs = q.sym_sizes();
  return {at::empty_symint({qs[0], qs[1], qs[2], qs[3]}, q.options().dtype(at::kBFloat16)),
          at::empty_symint({qs[0], qs[2], qs[1]}, q.options().dtype(at::kFloat))};
#else
  const AttnShape s = check_attention(q, k, v, scale);
  return {at::empty({s.B, s.Sq, s.H, s.D}, q.options().dtype(at::kBFloat16)),
          at::empty({s.B, s.H, s.Sq}, q.options().dtype(at::kFloat))};
#endif
}

#if XSTAGE_TORCH_CUDA
bool is_sm90(int device) {
  static std::array<std::atomic<int>, 64> known{};  // 0 unknown, 1 yes, 2 no
  if (device < 0 || device >= int(known.size())) return false;
  int v = known[device].load();
  if (v == 0) {
    int major = 0, minor = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    v = major == 9 && minor == 0 ? 1 : 2;
    known[device].store(v);
  }
  return v == 1;
}

namespace {
// XSTAGE_TORCH_ATTENTION=reference: the torch-op reference on every GPU (to test it).
bool use_kernel(int device) {
  const char* force = std::getenv("XSTAGE_TORCH_ATTENTION");
  return is_sm90(device) && !(force && std::string(force) == "reference");
}

attention::Tensor4 view_of(const at::Tensor& t) {
  return {t.data_ptr(), attention::DType::bf16, t.size(0), t.size(1), t.size(2), t.size(3),
          t.stride(0),  t.stride(1),            t.stride(2), t.stride(3)};
}

AttnResult flash_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttnShape& s,
                           bool causal) {
  const c10::cuda::CUDAGuard guard(q.device());
  at::Tensor out = at::empty({s.B, s.Sq, s.H, s.D}, q.options());
  at::Tensor lse = at::empty({s.B, s.H, s.Sq}, q.options().dtype(at::kFloat));
  attention::FwdArgs a;
  a.q = view_of(q);
  a.k = view_of(k);
  a.v = view_of(v);
  a.o = view_of(out);
  a.lse = lse.data_ptr<float>();
  a.causal = causal;
  a.softmax_scale = float(s.scale);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(q.device().index()).stream();
  translate_errors(kOp, [&] { attention::flash_fwd(a, stream); });
  return {out, lse};
}
}  // namespace
#endif

AttnResult attention_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                          c10::optional<double> scale) {
  const AttnShape s = check_attention(q, k, v, scale);
#if XSTAGE_TORCH_CUDA
  if (use_kernel(q.device().index())) return flash_attention(q, k, v, s, causal);
#endif
  return attention_torch_reference(q, k, v, s, causal);
}

}  // namespace xstage::torch_ops
