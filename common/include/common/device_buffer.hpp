// Owning device allocation (cudaMalloc/cudaFree) for host driver code.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstring>
#include <utility>
#include <vector>

#include "common/cuda_check.hpp"

namespace xstage {

// Host-driven copies and fills that have landed on the device when they return, so that
// a kernel launched next on any stream sees them. The plain calls do not promise that
// to the project's streams, which are non-blocking (not ordered after the legacy default
// stream, where cudaMemcpy and cudaMemset run): cudaMemcpy from pageable host memory may
// return once the data is staged, before its DMA lands, and cudaMemset to device memory
// is asynchronous. (A fused QKV launch right after such an upload read part of the
// previous buffer's order: docs/xstage-ulysses.md.)
inline void copy_to_device(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  XS_CHECK_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  XS_CHECK_CUDA(cudaStreamSynchronize(cudaStreamLegacy));
}
inline void fill_device(void* dst, int byte, std::size_t bytes) {
  if (bytes == 0) return;
  XS_CHECK_CUDA(cudaMemset(dst, byte, bytes));
  XS_CHECK_CUDA(cudaStreamSynchronize(cudaStreamLegacy));
}

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t count) : count_(count) {
    if (count) XS_CHECK_CUDA(cudaMalloc(&ptr_, count * sizeof(T)));
  }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(count_, o.count_);
    return *this;
  }
  T* get() const { return ptr_; }
  std::size_t size() const { return count_; }
  // Callers synchronise the stream that wrote the buffer first (cudaMemcpy runs on the
  // legacy stream, which does not wait for the project's non-blocking streams).
  std::vector<T> to_host(std::size_t n) const {
    std::vector<T> h(n);
    if (n) XS_CHECK_CUDA(cudaMemcpy(h.data(), ptr_, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }

 private:
  T* ptr_ = nullptr;
  std::size_t count_ = 0;
};

// Owning pinned host allocation mapped into the device's address space
// (cudaHostAlloc mapped + portable): the host reads and writes host(), kernels on any
// GPU reach the same bytes through device(), and every device access crosses the host
// link (PCIe). Zeroed on allocation.
template <typename T>
class MappedHostBuffer {
 public:
  MappedHostBuffer() = default;
  explicit MappedHostBuffer(std::size_t count) : count_(count) {
    if (count == 0) return;
    void* h = nullptr;
    XS_CHECK_CUDA(cudaHostAlloc(&h, count * sizeof(T), cudaHostAllocMapped | cudaHostAllocPortable));
    host_ = static_cast<T*>(h);
    std::memset(h, 0, count * sizeof(T));
    void* d = nullptr;
    XS_CHECK_CUDA(cudaHostGetDevicePointer(&d, h, 0));
    device_ = static_cast<T*>(d);
  }
  ~MappedHostBuffer() {
    if (host_) cudaFreeHost(host_);
  }
  MappedHostBuffer(MappedHostBuffer&& o) noexcept
      : host_(std::exchange(o.host_, nullptr)), device_(std::exchange(o.device_, nullptr)),
        count_(std::exchange(o.count_, 0)) {}
  MappedHostBuffer& operator=(MappedHostBuffer&& o) noexcept {
    std::swap(host_, o.host_);
    std::swap(device_, o.device_);
    std::swap(count_, o.count_);
    return *this;
  }
  T* host() const { return host_; }
  T* device() const { return device_; }
  std::size_t size() const { return count_; }

 private:
  T* host_ = nullptr;
  T* device_ = nullptr;
  std::size_t count_ = 0;
};

// A device copy of `h` that has landed (copy_to_device).
template <typename T>
DeviceBuffer<T> upload(const std::vector<T>& h) {
  DeviceBuffer<T> d(h.size());
  copy_to_device(d.get(), h.data(), h.size() * sizeof(T));
  return d;
}

}  // namespace xstage
