// The kernels behind torch.ops.xstage.* (schemas in register.cpp, the user's view in
// docs/xstage-torch.md). Private to xstage/torch.
#pragma once

#include <ATen/ATen.h>

#if __has_include(<c10/util/Optional.h>)
#include <c10/util/Optional.h>  // c10::optional: its own type in LibTorch 1.x, std::optional later
#else
#include <optional>
namespace c10 {
using std::optional;
}
#endif

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "xstage/moe/moe.hpp"

namespace xstage::torch_ops {

// ---- attention: [B, S, H, D] bf16 -> (out [B, Sq, H, D] bf16, lse [B, H, Sq] fp32) ----
using AttnResult = std::tuple<at::Tensor, at::Tensor>;
// Checks every argument (names it in the error) and resolves the softmax scale.
struct AttnShape {
  int64_t B = 0, Sq = 0, Skv = 0, H = 0, D = 0;
  double scale = 0;
};
AttnShape check_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const c10::optional<double>& scale);
AttnResult attention_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                         c10::optional<double> scale);
AttnResult attention_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                          c10::optional<double> scale);
AttnResult attention_meta(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                          c10::optional<double> scale);
// The same numbers from torch operators in fp32 (GPUs without the sm_90a kernel).
AttnResult attention_torch_reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const AttnShape& s, bool causal);

// ---- MoE at EP = 1 ------------------------------------------------------------------
// x [T, hidden] bf16, router_logits [T, E] fp32, w1 [E, 2I, hidden] bf16 (gate rows,
// then up rows), w2 [E, hidden, I] bf16 -> out [T, hidden] bf16.
struct MoeShape {
  int64_t tokens = 0, hidden = 0, experts = 0, inter = 0, topk = 0;
};
MoeShape check_moe_forward(const at::Tensor& x, const at::Tensor& logits, const at::Tensor& w1,
                           const at::Tensor& w2, int64_t topk);
at::Tensor moe_forward_cpu(const at::Tensor& x, const at::Tensor& logits, const at::Tensor& w1,
                           const at::Tensor& w2, int64_t topk);
at::Tensor moe_forward_cuda(const at::Tensor& x, const at::Tensor& logits, const at::Tensor& w1,
                            const at::Tensor& w2, int64_t topk);
at::Tensor moe_forward_meta(const at::Tensor& x, const at::Tensor& logits, const at::Tensor& w1,
                            const at::Tensor& w2, int64_t topk);
// Grouped: rows [R, hidden] bf16 already dispatched, grouped by expert with counts[e]
// rows for expert e (sum = R) -> SwiGLU FFN of each row by its expert, [R, hidden] bf16.
MoeShape check_moe_grouped(const at::Tensor& rows, at::IntArrayRef counts, const at::Tensor& w1,
                           const at::Tensor& w2);
at::Tensor moe_grouped_cpu(const at::Tensor& rows, at::IntArrayRef counts, const at::Tensor& w1,
                           const at::Tensor& w2);
at::Tensor moe_grouped_cuda(const at::Tensor& rows, at::IntArrayRef counts, const at::Tensor& w1,
                            const at::Tensor& w2);
at::Tensor moe_grouped_meta(const at::Tensor& rows, at::IntArrayRef counts, const at::Tensor& w1,
                            const at::Tensor& w2);
// The one-rank problem of a shape, and the routing of grouped rows (row i goes to the
// expert whose group holds it, weight 1: the combine then returns the expert's output).
moe::Problem moe_problem(const MoeShape& s);
moe::Routing grouped_routing(at::IntArrayRef counts);
// Router logits [T, E] fp32 -> (expert [T, k] int32, weight [T, k] fp32), CPU.
std::tuple<at::Tensor, at::Tensor> moe_route_cpu(const at::Tensor& logits, int64_t topk);

// ---- Burst-Gap model and advisor (CPU, JSON text in and out) --------------------------
// params: "" for the shipped H200 fits, JSON text of a params file, or a path to one.
std::string burstgap_predict(const std::string& params, int64_t sms, double burst_bytes, double gap_ns,
                             int64_t bursts, const std::string& pattern, const std::string& store, int64_t gpus);
std::string burstgap_advise(const std::string& params, int64_t bytes_per_burst, int64_t sms,
                            double compute_ns_between_bursts, int64_t bursts, const std::string& pattern,
                            const std::string& store, int64_t gpus);

#if XSTAGE_TORCH_CUDA
// The sm_90a kernels run on this device (compute capability 9.0); asked once per device.
bool is_sm90(int device);
#endif

// What this library was built with (JSON): LibTorch version, CUDA paths.
std::string build_info();

}  // namespace xstage::torch_ops
