// torch.ops.xstage.moe_forward / moe_grouped / moe_route: argument checks and the CPU
// paths, which run the fp64 host reference of xstage/moe (bf16 rounding where the
// fused kernel stores bf16). The CUDA paths are in moe_cuda.cpp.
#include <c10/util/Exception.h>

#include <cstring>
#include <numeric>

#include "checks.hpp"
#include "ops.hpp"

namespace xstage::torch_ops {

namespace {
constexpr const char* kForward = "xstage.moe_forward";
constexpr const char* kGrouped = "xstage.moe_grouped";
constexpr const char* kRoute = "xstage.moe_route";

std::vector<moe::bf16_bits> bits_of(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  const auto* p = reinterpret_cast<const moe::bf16_bits*>(c.data_ptr<at::BFloat16>());
  return std::vector<moe::bf16_bits>(p, p + c.numel());
}

std::vector<float> floats_of(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kFloat).contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

// w1 [E, 2I, hidden] and w2 [E, hidden, I] against the hidden size of `x`; fills E and I.
void check_weights(const char* op, const Arg& x, const Arg& w1, const Arg& w2, MoeShape& s) {
  for (const Arg* a : {&w1, &w2}) {
    check_dims(*a, 3, a == &w1 ? "[E, 2I, hidden]" : "[E, hidden, I]");
    check_dtype(*a, at::kBFloat16);
    check_same_device(*a, x);
    check_contiguous(*a);
  }
  s.experts = w1.t.size(0);
  TORCH_CHECK_VALUE(w1.t.size(1) > 0 && w1.t.size(1) % 2 == 0, op, ": w1 has ", w1.t.size(1),
                    " rows per expert (shape ", w1.t.sizes(), "); it must be 2I: I gate rows, then I up rows");
  s.inter = w1.t.size(1) / 2;
  check_size(w1, 2, s.hidden, "hidden of the tokens");
  check_size(w2, 0, s.experts, "E of w1");
  check_size(w2, 1, s.hidden, "hidden of the tokens");
  check_size(w2, 2, s.inter, "I of w1");
}

// x (or rows) [T, hidden] bf16.
void check_tokens(const Arg& x, MoeShape& s) {
  check_dims(x, 2, "[T, hidden]");
  check_dtype(x, at::kBFloat16);
  check_contiguous(x);
  s.tokens = x.t.size(0);
  s.hidden = x.t.size(1);
}

at::Tensor run_reference(const char* op, const MoeShape& s, const moe::Routing& routing, const at::Tensor& x,
                         const at::Tensor& w1, const at::Tensor& w2) {
  const moe::Problem p = moe_problem(s);
  std::vector<float> out = translate_errors(op, [&] {
    const moe::Layout layout = moe::build_layout(p, {routing});
    const moe::Weights w{{bits_of(w1)}, {bits_of(w2)}};
    return moe::reference_forward(p, {routing}, layout, w, {bits_of(x)})[0];
  });
  at::Tensor t = at::empty({s.tokens, s.hidden}, at::TensorOptions().dtype(at::kFloat));
  std::memcpy(t.data_ptr<float>(), out.data(), out.size() * sizeof(float));
  return t.to(at::kBFloat16);  // exact: the reference's values are bf16 values
}
}  // namespace

moe::Problem moe_problem(const MoeShape& s) {
  return {1, int(s.tokens), int(s.experts), int(s.topk), int(s.hidden), int(s.inter)};
}

moe::Routing grouped_routing(at::IntArrayRef counts) {
  moe::Routing r;
  r.topk = 1;
  for (std::size_t e = 0; e < counts.size(); ++e) r.expert.insert(r.expert.end(), counts[e], int(e));
  r.tokens = int(r.expert.size());
  r.weight.assign(r.expert.size(), 1.0f);
  return r;
}

MoeShape check_moe_forward(const at::Tensor& x, const at::Tensor& logits, const at::Tensor& w1,
                           const at::Tensor& w2, int64_t topk) {
  const Arg ax{kForward, "x", x}, al{kForward, "router_logits", logits};
  MoeShape s;
  check_tokens(ax, s);
  TORCH_CHECK_VALUE(s.tokens > 0, kForward, ": x has no tokens (shape ", x.sizes(), ")");
  check_weights(kForward, ax, {kForward, "w1", w1}, {kForward, "w2", w2}, s);
  check_dims(al, 2, "[T, E]");
  check_dtype(al, at::kFloat);
  check_same_device(al, ax);
  check_contiguous(al);
  check_size(al, 0, s.tokens, "T of x");
  check_size(al, 1, s.experts, "E of w1");
  TORCH_CHECK_VALUE(topk >= 1 && topk <= s.experts, kForward, ": topk must be in 1..E = ", s.experts, ", got ", topk);
  s.topk = topk;
  translate_errors(kForward, [&] { moe::validate(moe_problem(s)); });
  return s;
}

MoeShape check_moe_grouped(const at::Tensor& rows, at::IntArrayRef counts, const at::Tensor& w1,
                           const at::Tensor& w2) {
  const Arg ar{kGrouped, "rows", rows};
  MoeShape s;
  check_tokens(ar, s);
  check_weights(kGrouped, ar, {kGrouped, "w1", w1}, {kGrouped, "w2", w2}, s);
  s.topk = 1;
  TORCH_CHECK_VALUE(int64_t(counts.size()) == s.experts, kGrouped, ": counts has ", counts.size(),
                    " entries but w1 has E = ", s.experts, " experts");
  for (std::size_t e = 0; e < counts.size(); ++e)
    TORCH_CHECK_VALUE(counts[e] >= 0, kGrouped, ": counts[", e, "] is negative (", counts[e], ")");
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t(0));
  TORCH_CHECK_VALUE(total == s.tokens, kGrouped, ": counts sum to ", total, " but rows has ", s.tokens, " rows");
  if (s.tokens > 0) translate_errors(kGrouped, [&] { moe::validate(moe_problem(s)); });
  return s;
}

at::Tensor moe_forward_cpu(const at::Tensor& x, const at::Tensor& logits, const at::Tensor& w1,
                           const at::Tensor& w2, int64_t topk) {
  const MoeShape s = check_moe_forward(x, logits, w1, w2, topk);
  const moe::Routing r = translate_errors(kForward, [&] {
    return moe::route_from_logits(floats_of(logits), int(s.tokens), int(s.experts), int(s.topk));
  });
  return run_reference(kForward, s, r, x, w1, w2);
}

at::Tensor moe_grouped_cpu(const at::Tensor& rows, at::IntArrayRef counts, const at::Tensor& w1,
                           const at::Tensor& w2) {
  const MoeShape s = check_moe_grouped(rows, counts, w1, w2);
  if (s.tokens == 0) return at::empty({0, s.hidden}, rows.options());
  return run_reference(kGrouped, s, grouped_routing(counts), rows, w1, w2);
}

at::Tensor moe_forward_meta(const at::Tensor& x, const at::Tensor& logits, const at::Tensor& w1,
                            const at::Tensor& w2, int64_t topk) {
  const MoeShape s = check_moe_forward(x, logits, w1, w2, topk);
  return at::empty({s.tokens, s.hidden}, x.options());
}

at::Tensor moe_grouped_meta(const at::Tensor& rows, at::IntArrayRef counts, const at::Tensor& w1,
                            const at::Tensor& w2) {
  const MoeShape s = check_moe_grouped(rows, counts, w1, w2);
  return at::empty({s.tokens, s.hidden}, rows.options());
}

std::tuple<at::Tensor, at::Tensor> moe_route_cpu(const at::Tensor& logits, int64_t topk) {
  const Arg al{kRoute, "router_logits", logits};
  check_dims(al, 2, "[T, E]");
  check_dtype(al, at::kFloat);
  const int64_t T = logits.size(0), E = logits.size(1);
  TORCH_CHECK_VALUE(topk >= 1 && topk <= E, kRoute, ": topk must be in 1..E = ", E, ", got ", topk);
  const moe::Routing r =
      translate_errors(kRoute, [&] { return moe::route_from_logits(floats_of(logits), int(T), int(E), int(topk)); });
  at::Tensor expert = at::empty({T, topk}, at::TensorOptions().dtype(at::kInt));
  at::Tensor weight = at::empty({T, topk}, at::TensorOptions().dtype(at::kFloat));
  std::memcpy(expert.data_ptr<int>(), r.expert.data(), r.expert.size() * sizeof(int));
  std::memcpy(weight.data_ptr<float>(), r.weight.data(), r.weight.size() * sizeof(float));
  return {expert, weight};
}

}  // namespace xstage::torch_ops

#if !XSTAGE_TORCH_CUDA
// Built without the fused kernel (or against a LibTorch without CUDA): CUDA tensors go
// through the CPU reference, so the operators still answer on any device.
namespace xstage::torch_ops {
at::Tensor moe_forward_cuda(const at::Tensor& x, const at::Tensor& logits, const at::Tensor& w1,
                            const at::Tensor& w2, int64_t topk) {
  return moe_forward_cpu(x.cpu(), logits.cpu(), w1.cpu(), w2.cpu(), topk).to(x.device());
}
at::Tensor moe_grouped_cuda(const at::Tensor& rows, at::IntArrayRef counts, const at::Tensor& w1,
                            const at::Tensor& w2) {
  return moe_grouped_cpu(rows.cpu(), counts, w1.cpu(), w2.cpu()).to(rows.device());
}
}  // namespace xstage::torch_ops
#endif
