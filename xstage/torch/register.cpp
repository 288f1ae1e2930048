// The schemas of torch.ops.xstage.* and their kernels per dispatch key: CPU, CUDA and
// Meta (shapes only, so that torch.compile and FakeTensor trace the tensor operators).
// The Burst-Gap operators take no tensor: one kernel for every key.
#include <torch/library.h>

#include "ops.hpp"

TORCH_LIBRARY(xstage, m) {
  m.def("attention(Tensor q, Tensor k, Tensor v, bool causal=False, float? scale=None) -> (Tensor out, Tensor lse)");
  m.def("moe_forward(Tensor x, Tensor router_logits, Tensor w1, Tensor w2, int topk) -> Tensor");
  m.def("moe_grouped(Tensor rows, int[] counts, Tensor w1, Tensor w2) -> Tensor");
  m.def("moe_route(Tensor router_logits, int topk) -> (Tensor expert, Tensor weight)");
  m.def("burstgap_predict(str params, int sms, float burst_bytes, float gap_ns, int bursts=48, "
        "str pattern='peer', str store='st16', int gpus=2) -> str",
        &xstage::torch_ops::burstgap_predict);
  m.def("advise(str params, int bytes_per_burst, int sms, float compute_ns_between_bursts, int bursts=1, "
        "str pattern='peer', str store='st16', int gpus=2) -> str",
        &xstage::torch_ops::burstgap_advise);
  m.def("build_info() -> str", &xstage::torch_ops::build_info);
}

TORCH_LIBRARY_IMPL(xstage, CPU, m) {
  m.impl("attention", &xstage::torch_ops::attention_cpu);
  m.impl("moe_forward", &xstage::torch_ops::moe_forward_cpu);
  m.impl("moe_grouped", &xstage::torch_ops::moe_grouped_cpu);
  m.impl("moe_route", &xstage::torch_ops::moe_route_cpu);
}

TORCH_LIBRARY_IMPL(xstage, CUDA, m) {
  m.impl("attention", &xstage::torch_ops::attention_cuda);
  m.impl("moe_forward", &xstage::torch_ops::moe_forward_cuda);
  m.impl("moe_grouped", &xstage::torch_ops::moe_grouped_cuda);
}

TORCH_LIBRARY_IMPL(xstage, Meta, m) {
  m.impl("attention", &xstage::torch_ops::attention_meta);
  m.impl("moe_forward", &xstage::torch_ops::moe_forward_meta);
  m.impl("moe_grouped", &xstage::torch_ops::moe_grouped_meta);
}

// LibTorch 1.13 has no autograd fallthrough for meta tensors (2.x has): without these,
// a meta call stops at the AutogradMeta key before reaching the Meta kernels above.
TORCH_LIBRARY_IMPL(xstage, AutogradMeta, m) {
  m.impl("attention", torch::CppFunction::makeFallthrough());
  m.impl("moe_forward", torch::CppFunction::makeFallthrough());
  m.impl("moe_grouped", torch::CppFunction::makeFallthrough());
}
