// CUDA and NCCL error checks, usable from .cu files (this header does not pull in
// fmt, whose consteval format strings nvcc's front end rejects). All of them throw
// common::Error("file:line: call failed: reason"), so front ends print one line
// and exit non-zero.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

namespace xstage::detail {
[[noreturn]] void cuda_failed(const char* file, int line, const char* call, cudaError_t err);
[[noreturn]] void nccl_failed(const char* file, int line, const char* call, ncclResult_t res);
[[noreturn]] void check_failed(const char* file, int line, const char* message);
}  // namespace xstage::detail

#define XS_CHECK_CUDA(call)                                                                         \
  do {                                                                                              \
    cudaError_t xs_err_ = (call);                                                                   \
    if (xs_err_ != cudaSuccess) [[unlikely]] ::xstage::detail::cuda_failed(__FILE__, __LINE__, #call, xs_err_); \
  } while (0)

#define XS_CHECK_NCCL(call)                                                                         \
  do {                                                                                              \
    ncclResult_t xs_res_ = (call);                                                                  \
    if (xs_res_ != ncclSuccess) [[unlikely]] ::xstage::detail::nccl_failed(__FILE__, __LINE__, #call, xs_res_); \
  } while (0)

// Launch errors now; execution errors surface at the next synchronisation.
#define XS_CHECK_LAUNCH() XS_CHECK_CUDA(cudaGetLastError())

namespace common {
// A driver API function through the runtime's entry point, with the ABI of its CUDA 12.0
// signature, so no target links against libcuda; throws common::Error naming it when the
// driver lacks it. Callers cache the pointer (it does not change within a process).
void* driver_function(const char* name);
// Stream memory operations on the GPU's front end (no SM, no kernel), through
// driver_function: `stream` waits until the 32-bit word at device address `word` is at
// least `value` (cuStreamWaitValue32 GEQ, which compares cyclically: (int)(word - value)
// >= 0; no timeout of its own), or writes `value` there once the stream's earlier work
// is done and visible (cuStreamWriteValue32). Throw common::Error naming the call.
void stream_wait_geq(cudaStream_t stream, const unsigned* word, unsigned value);
void stream_write(cudaStream_t stream, unsigned* word, unsigned value);
// The device's hardware work queues. The runtime maps streams round-robin onto
// CUDA_DEVICE_MAX_CONNECTIONS queues (8 unless set) and each queue runs in order, so a
// stream memory wait holds every stream that shares its queue: with the P ranks of a
// OneGpuGroup and their combine-drain streams (2P > 8 at P = 8) one rank's drain waited
// behind another's, and the drain ran 10-15 % slower (measured on H200). Programs ask for
// the most (32) before their first CUDA call; a value the user set is kept. The count is
// fixed once the context exists.
void request_stream_queues();
int stream_queues();  // as CUDA_DEVICE_MAX_CONNECTIONS says (8 when unset or unreadable)
}  // namespace common

// A plain-message check for .cu files (host code elsewhere uses XS_ASSERT).
#define XS_CHECK_MSG(cond, message)                                                      \
  do {                                                                                   \
    if (!(cond)) [[unlikely]] ::xstage::detail::check_failed(__FILE__, __LINE__, message); \
  } while (0)
