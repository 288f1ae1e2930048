// A kernel that reads mapped pinned host memory once on every SM (host_read.cu), timed by
// measure_host_read_GBps (copy_costs.cpp). Private to xstage/bench.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace xstage::bench {

// Reads `bytes` (a multiple of 16) at `device_view` on `stream`; `sink` keeps the loads.
void launch_host_read(const void* device_view, std::size_t bytes, unsigned* sink, cudaStream_t stream);

}  // namespace xstage::bench
