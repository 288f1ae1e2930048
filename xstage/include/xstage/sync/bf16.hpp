// bf16 as raw bits (uint16_t), for host and device, defined once.
//
// Round to nearest even. On the host a NaN stays a NaN with its payload's top bits
// (quiet bit set), so a poisoned value survives the round trip; on the device the
// conversion instructions (which give the canonical NaN) are used.
#pragma once

#include <cstdint>
#include <cstring>

#include "common/host_device.hpp"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#endif

namespace xstage::sync {

XS_HD uint16_t to_bf16(float f) {
#if defined(__CUDA_ARCH__)
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return static_cast<uint16_t>((u >> 16) | 0x40);
  const uint32_t bias = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + bias) >> 16);
#endif
}

XS_HD float from_bf16(uint16_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(static_cast<uint32_t>(b) << 16);
#else
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// Two values in one word: lo in bits 0-15, hi in bits 16-31 (memory order lo, hi).
XS_HD uint32_t pack_bf16x2(float lo, float hi) {
#if defined(__CUDA_ARCH__)
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // one conversion of both
  return *reinterpret_cast<const uint32_t*>(&v);
#else
  return static_cast<uint32_t>(to_bf16(lo)) | (static_cast<uint32_t>(to_bf16(hi)) << 16);
#endif
}

}  // namespace xstage::sync
