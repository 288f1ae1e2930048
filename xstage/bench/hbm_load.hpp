// An HBM-streaming load (hbm_load.cu), under which measure_copy_costs can time the copy
// engine. Private to xstage/bench.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "common/device_buffer.hpp"

namespace xstage::bench {

class HbmLoad {
 public:
  explicit HbmLoad(std::size_t bytes);  // two device buffers of `bytes`
  // Launches the load on `stream` (every SM); it runs until stop_after's write or max_s.
  void start(cudaStream_t stream, double max_s);
  // Ends the load once `stream`'s work so far is done (a stream write of its flag).
  void stop_after(cudaStream_t stream);

 private:
  DeviceBuffer<uint4> src_, dst_;
  DeviceBuffer<unsigned> stop_;
  DeviceBuffer<unsigned long long> now_;
};

}  // namespace xstage::bench
