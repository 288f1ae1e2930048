#include "common/cuda_check.hpp"

#include <cuda.h>

#include <fmt/format.h>

#include <cstdlib>

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

namespace {
using StreamValueFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
// One lookup per function per process (the entry points do not change).
StreamValueFn stream_value_fn(bool wait) {
  static const auto wait_fn = reinterpret_cast<StreamValueFn>(driver_function("cuStreamWaitValue32"));
  static const auto write_fn = reinterpret_cast<StreamValueFn>(driver_function("cuStreamWriteValue32"));
  return wait ? wait_fn : write_fn;
}
}  // namespace

void stream_wait_geq(cudaStream_t stream, const unsigned* word, unsigned value) {
  const CUresult rc = stream_value_fn(true)(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(word),
                                            value, CU_STREAM_WAIT_VALUE_GEQ);
  XS_ASSERT(rc == CUDA_SUCCESS, "cuStreamWaitValue32 failed (CUresult {})", static_cast<int>(rc));
}
void stream_write(cudaStream_t stream, unsigned* word, unsigned value) {
  const CUresult rc = stream_value_fn(false)(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(word),
                                             value, CU_STREAM_WRITE_VALUE_DEFAULT);
  XS_ASSERT(rc == CUDA_SUCCESS, "cuStreamWriteValue32 failed (CUresult {})", static_cast<int>(rc));
}

void request_stream_queues() { setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", /*overwrite=*/0); }

int stream_queues() {
  const char* v = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  const int n = v ? std::atoi(v) : 0;
  return n >= 1 && n <= 32 ? n : 8;
}

}  // namespace common
