// Host side of TMA: building CUtensorMap descriptors through the driver entry
// point (no link against libcuda; the runtime hands out cuTensorMapEncodeTiled).
#pragma once

#include <cuda.h>

#include <cstdint>

namespace xstage::hopper {

// A bf16 tensor of rank 2..5 seen by TMA: dims[0] is the contiguous one.
struct TiledMapSpec {
  const void* base = nullptr;       // 16-byte aligned global address
  int rank = 0;                      // 2..5
  uint64_t dims[5] = {};             // elements per dimension, innermost first
  uint64_t strides_bytes[5] = {};    // byte stride of dims 1..rank-1 (strides_bytes[0] unused, = element size)
  uint32_t box[5] = {};              // box extent per dimension (box[0] * 2 bytes <= 128 with 128-B swizzle)
  bool swizzle_128b = true;          // CU_TENSOR_MAP_SWIZZLE_128B, else none
};

// Encodes the map (bf16, 128-B L2 promotion, zero fill out of bounds). Throws
// common::Error with the driver's code and the offending spec on failure.
CUtensorMap make_tiled_map_bf16(const TiledMapSpec& spec);

}  // namespace xstage::hopper
