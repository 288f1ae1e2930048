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
