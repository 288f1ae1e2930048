// Argument checks of the operators. Each failure raises a c10 error that PyTorch turns
// into a Python exception (TypeError for dtype and device, ValueError for shapes and
// layout) whose message starts with the operator and names the argument, e.g.
// "xstage.attention: q must be bf16, got Float".
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <utility>

#include "common/check.hpp"

namespace xstage::torch_ops {

struct Arg {
  const char* op;    // "xstage.attention"
  const char* name;  // "q"
  const at::Tensor& t;
};

void check_dtype(const Arg& a, at::ScalarType want);
// layout: how the dimensions are named in the message, e.g. "[B, S, H, D]".
void check_dims(const Arg& a, int64_t dims, const char* layout);
void check_contiguous(const Arg& a);
// Dimension `dim` of a equals `want`, which is `what` (e.g. "B of q").
void check_size(const Arg& a, int64_t dim, int64_t want, const char* what);
void check_same_device(const Arg& a, const Arg& ref);
// A rule of a value: raises ValueError "op: message" when ok is false.
void check_value(bool ok, const char* op, const std::string& message);

// Runs f; a common::Error of the xstage libraries becomes a ValueError naming the op.
template <typename F>
auto translate_errors(const char* op, F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (const common::Error& e) {
    check_value(false, op, e.what());
    throw;  // not reached
  }
}

}  // namespace xstage::torch_ops
