#include "common/cuda_check.hpp"

#include <fmt/format.h>

#include "common/check.hpp"

namespace xstage::detail {

void cuda_failed(const char* file, int line, const char* call, cudaError_t err) {
  common::raise(file, line, fmt::format("{} failed: {} ({})", call, cudaGetErrorString(err), cudaGetErrorName(err)));
}

void nccl_failed(const char* file, int line, const char* call, ncclResult_t res) {
  common::raise(file, line, fmt::format("{} failed: {}", call, ncclGetErrorString(res)));
}

void check_failed(const char* file, int line, const char* message) { common::raise(file, line, message); }

}  // namespace xstage::detail

namespace common {

void* driver_function(const char* name) {
  // cudaGetDriverEntryPoint is deprecated in CUDA 13; ByVersion asks for the 12.0 ABI.
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  const cudaError_t err = cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q);
  XS_ASSERT(err == cudaSuccess && q == cudaDriverEntryPointSuccess && fn,
            "cannot get {} from the driver ({}, query result {})", name, cudaGetErrorString(err), static_cast<int>(q));
  return fn;
}

}  // namespace common
