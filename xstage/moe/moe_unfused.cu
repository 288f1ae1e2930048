// Small kernels of the unfused path (and device-side random fill for benches).
#include <cuda_bf16.h>

#include "xstage/moe/unfused.hpp"
#include "common/cuda_check.hpp"
#include "xstage/sync/bf16.hpp"

namespace xstage::moe {

namespace {

using sync::from_bf16;
using sync::to_bf16;

__global__ void fill_kernel(std::uint16_t* p, std::size_t n, std::uint64_t seed, float scale) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x) {
    std::uint64_t z = seed + i * 0x9E3779B97F4A7C15ull;  // splitmix64
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float u = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
    p[i] = to_bf16((2.0f * u - 1.0f) * scale);
  }
}

__global__ void gather_kernel(uint4* dst, const uint4* src, const int* idx, int rows, int vec, bool scatter) {
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const std::size_t d = scatter ? std::size_t(idx[r]) : std::size_t(r), s = scatter ? std::size_t(r) : std::size_t(idx[r]);
    for (int v = threadIdx.x; v < vec; v += blockDim.x) dst[d * vec + v] = src[s * vec + v];
  }
}

__global__ void swiglu_kernel(std::uint16_t* h, const std::uint16_t* g, int rows, int inter) {
  const std::size_t n = std::size_t(rows) * inter;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t r = i / inter, j = i % inter;
    const float gv = from_bf16(g[r * 2 * inter + j]), uv = from_bf16(g[r * 2 * inter + inter + j]);
    h[i] = to_bf16(gv / (1.0f + __expf(-gv)) * uv);
  }
}

__global__ void combine_kernel(std::uint16_t* out, const std::uint16_t* comb, const float* w, int tokens, int topk,
                               int hidden) {
  for (int t = blockIdx.x; t < tokens; t += gridDim.x)
    for (int c = threadIdx.x; c < hidden; c += blockDim.x) {
      float acc = 0.f;
      for (int j = 0; j < topk; ++j) {
        const std::size_t slot = std::size_t(t) * topk + j;
        acc = __fadd_rn(acc, __fmul_rn(w[slot], from_bf16(comb[slot * hidden + c])));
      }
      out[std::size_t(t) * hidden + c] = to_bf16(acc);
    }
}

int grid_for(std::size_t n) { return static_cast<int>(std::min<std::size_t>((n + 255) / 256, 4096)); }

}  // namespace

void fill_random_bf16(std::uint16_t* p, std::size_t n, std::uint64_t seed, float scale, cudaStream_t s) {
  if (!n) return;
  fill_kernel<<<grid_for(n), 256, 0, s>>>(p, n, seed, scale);
  XS_CHECK_LAUNCH();
}

void gather_rows(std::uint16_t* dst, const std::uint16_t* src, const int* idx, int rows, int cols, cudaStream_t s) {
  if (rows <= 0) return;
  XS_CHECK_MSG(cols % 8 == 0, "gather_rows: cols must be a multiple of 8");
  gather_kernel<<<std::min(rows, 4096), 128, 0, s>>>(reinterpret_cast<uint4*>(dst), reinterpret_cast<const uint4*>(src),
                                                     idx, rows, cols / 8, false);
  XS_CHECK_LAUNCH();
}

void scatter_rows(std::uint16_t* dst, const std::uint16_t* src, const int* idx, int rows, int cols, cudaStream_t s) {
  if (rows <= 0) return;
  XS_CHECK_MSG(cols % 8 == 0, "scatter_rows: cols must be a multiple of 8");
  gather_kernel<<<std::min(rows, 4096), 128, 0, s>>>(reinterpret_cast<uint4*>(dst), reinterpret_cast<const uint4*>(src),
                                                     idx, rows, cols / 8, true);
  XS_CHECK_LAUNCH();
}

void swiglu(std::uint16_t* h, const std::uint16_t* g, int rows, int inter, cudaStream_t s) {
  if (rows <= 0) return;
  swiglu_kernel<<<grid_for(std::size_t(rows) * inter), 256, 0, s>>>(h, g, rows, inter);
  XS_CHECK_LAUNCH();
}

void weighted_combine(std::uint16_t* out, const std::uint16_t* comb, const float* w, int tokens, int topk, int hidden,
                      cudaStream_t s) {
  combine_kernel<<<std::min(tokens, 4096), 256, 0, s>>>(out, comb, w, tokens, topk, hidden);
  XS_CHECK_LAUNCH();
}

}  // namespace xstage::moe
