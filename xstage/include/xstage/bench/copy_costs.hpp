// The copy engine's costs as a drain meets them (burstgap::CopyCosts), measured before a
// bench's rows: one procedure for every bench that hands a link's bytes to the copy
// engine (the MoE combine drain, the Ulysses copy-engine drain), each giving its own copy
// shape and conditions.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>

#include "xstage/burstgap/burstgap.hpp"

namespace xstage::bench {

// `streams` streams at once, each issuing `pairs` pairs of a met stream wait and one
// copy, optionally while a load streams HBM on every SM (the condition of drains whose
// copies run beside kernels that stream their operands from HBM: it raises the cost per
// operation, not the rate). The rate is `bulk`'s alone, on an idle GPU.
struct CopyCostProbe {
  int streams = 1;
  int pairs = 32;
  bool under_hbm_load = false;
  std::function<void(cudaStream_t stream, int s, int i)> copy;  // stream s's i-th copy
  double copy_bytes = 0;                                        // of one such copy
  std::function<void(cudaStream_t stream)> bulk;                // copies timed for the rate
  double bulk_bytes = 0;
};

// The rate (bulk_bytes over bulk's time) and the fixed cost of one stream operation (a
// wait or a copy): the slowest stream's time less all the streams' copy bytes at that
// rate, over the 2 x pairs x streams operations. The second of two passes each (the first
// warms the path up). Throws (one line) on a probe without copies or bytes.
burstgap::CopyCosts measure_copy_costs(const CopyCostProbe& probe);

// The rate (GB/s) at which every SM, reading `bytes` of mapped pinned host memory once
// (`device_view`: its device pointer), brings it in over the link: a combine's reads back
// after a copy-engine drain. The second of two passes on `stream`.
double measure_host_read_GBps(const void* device_view, std::size_t bytes, cudaStream_t stream);

}  // namespace xstage::bench
