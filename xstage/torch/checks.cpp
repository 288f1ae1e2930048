#include "checks.hpp"

#include <c10/util/Exception.h>

namespace xstage::torch_ops {

namespace {
const char* dtype_word(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16: return "bf16";
    case at::kFloat: return "float32";
    case at::kInt: return "int32";
    case at::kByte: return "uint8";
    default: return c10::toString(t);
  }
}
}  // namespace

void check_dtype(const Arg& a, at::ScalarType want) {
  TORCH_CHECK_TYPE(a.t.scalar_type() == want, a.op, ": ", a.name, " must be ", dtype_word(want), ", got ",
                   c10::toString(a.t.scalar_type()));
}

void check_dims(const Arg& a, int64_t dims, const char* layout) {
  TORCH_CHECK_VALUE(a.t.dim() == dims, a.op, ": ", a.name, " must be ", dims, "-D ", layout, ", got ", a.t.dim(),
                    "-D with shape ", a.t.sizes());
}

void check_contiguous(const Arg& a) {
  TORCH_CHECK_VALUE(a.t.is_contiguous(), a.op, ": ", a.name, " must be contiguous (strides ", a.t.strides(),
                    " for shape ", a.t.sizes(), "); call .contiguous()");
}

void check_size(const Arg& a, int64_t dim, int64_t want, const char* what) {
  TORCH_CHECK_VALUE(a.t.size(dim) == want, a.op, ": ", a.name, " has size ", a.t.size(dim), " in dimension ", dim,
                    " (shape ", a.t.sizes(), ") but must match ", what, " = ", want);
}

void check_same_device(const Arg& a, const Arg& ref) {
  TORCH_CHECK_TYPE(a.t.device() == ref.t.device(), a.op, ": ", a.name, " is on ", a.t.device(), " but ", ref.name,
                   " is on ", ref.t.device(), "; all tensors must be on one device");
}

void check_value(bool ok, const char* op, const std::string& message) {
  TORCH_CHECK_VALUE(ok, op, ": ", message);
}

}  // namespace xstage::torch_ops
