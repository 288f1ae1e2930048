// GPU naive attention reference and device fills (tests and benchmarks).
//
// One warp per (batch, head, query row); lane l owns head-dim elements
// l, l+32, ... Two passes over the keys: the exact row max, then p = exp(s - max),
// the sum and p·V, all in fp32 (dot products reduced over the warp). Slow
// (O(S²·D) with a shuffle reduction per key) but simple enough to trust, and
// checked against the fp64 CPU reference on small cases.
#include <cuda_bf16.h>

#include <cmath>

#include "xstage/attention/attention_cuda.hpp"
#include "common/cuda_check.hpp"
#include "xstage/sync/bf16.hpp"

namespace xstage::attention {

namespace {

struct NaiveView {
  const __nv_bfloat16* base;
  int64_t sb, ss, sh;
  __device__ __forceinline__ float at(int b, int s, int h, int d) const {
    return __bfloat162float(base[b * sb + s * ss + h * sh + d]);
  }
};

struct NaiveParams {
  NaiveView q, k, v;
  int B, Sq, Skv, H;
  bool causal;
  float scale;
  const int* rows;
  int n_rows;
  float* o_out;
  float* lse_out;
};

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

template <int D, bool kEmulate>
__global__ void naive_kernel(NaiveParams p) {
  constexpr int kPer = D / 32;
  const int64_t warp_id = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  const int64_t total = static_cast<int64_t>(p.B) * p.H * p.n_rows;
  if (warp_id >= total) return;
  const int ri = static_cast<int>(warp_id % p.n_rows);
  const int h = static_cast<int>((warp_id / p.n_rows) % p.H);
  const int b = static_cast<int>(warp_id / (static_cast<int64_t>(p.n_rows) * p.H));
  const int i = p.rows ? p.rows[ri] : ri;
  const MaskInfo mask{p.Sq, p.Skv, p.causal};

  float q[kPer];
#pragma unroll
  for (int u = 0; u < kPer; ++u) q[u] = p.q.at(b, i, h, lane + 32 * u);

  float mx = -INFINITY;
  for (int j = 0; j < p.Skv; ++j) {
    if (!mask.visible(i, j)) continue;
    float dot = 0.f;
#pragma unroll
    for (int u = 0; u < kPer; ++u) dot += q[u] * p.k.at(b, j, h, lane + 32 * u);
    mx = fmaxf(mx, warp_sum(dot) * p.scale);
  }
  float acc[kPer] = {};
  float sum = 0.f;
  if (mx != -INFINITY) {
    for (int j = 0; j < p.Skv; ++j) {
      if (!mask.visible(i, j)) continue;
      float dot = 0.f;
#pragma unroll
      for (int u = 0; u < kPer; ++u) dot += q[u] * p.k.at(b, j, h, lane + 32 * u);
      const float e = expf(warp_sum(dot) * p.scale - mx);
      sum += e;
      const float w = kEmulate ? sync::from_bf16(sync::to_bf16(e)) : e;
#pragma unroll
      for (int u = 0; u < kPer; ++u) acc[u] += w * p.v.at(b, j, h, lane + 32 * u);
    }
  }
  const float inv = sum > 0.f ? 1.f / sum : 0.f;
  float* out = p.o_out + ((static_cast<int64_t>(b) * p.n_rows + ri) * p.H + h) * D;
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    const float x = acc[u] * inv;
    out[lane + 32 * u] = kEmulate ? sync::from_bf16(sync::to_bf16(x)) : x;
  }
  if (p.lse_out && lane == 0)
    p.lse_out[(static_cast<int64_t>(b) * p.H + h) * p.n_rows + ri] = sum > 0.f ? mx + logf(sum) : -INFINITY;
}

NaiveView view_of(const Tensor4& t) {
  return {static_cast<const __nv_bfloat16*>(t.data), t.stride_b, t.stride_s, t.stride_h};
}

__device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

__global__ void fill_random_kernel(__nv_bfloat16* dst, int64_t n, uint64_t seed, float stddev) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t r = mix64(seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(i));
    // Box-Muller from two 24-bit uniforms in (0, 1].
    const float u1 = (static_cast<float>(r & 0xFFFFFF) + 1.f) * (1.f / 16777216.f);
    const float u2 = static_cast<float>((r >> 24) & 0xFFFFFF) * (1.f / 16777216.f);
    const float z = sqrtf(-2.f * logf(u1)) * cospif(2.f * u2);
    dst[i] = __float2bfloat16_rn(z * stddev);
  }
}

__global__ void fill_bits_kernel(uint16_t* dst, int64_t n, uint16_t bits) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = bits;
}

__global__ void fill_f32_kernel(float* dst, int64_t n, float value) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = value;
}

int fill_blocks(int64_t n) { return static_cast<int>(std::min<int64_t>((n + 255) / 256, 4096)); }

}  // namespace

void naive_attention(const NaiveArgs& a, cudaStream_t stream) {
  const FwdArgs& f = a.fwd;
  XS_CHECK_MSG(f.q.D == 64 || f.q.D == 128, "naive attention: head dim must be 64 or 128");
  XS_CHECK_MSG(a.o_out != nullptr, "naive attention: no output buffer");
  NaiveParams p{};
  p.q = view_of(f.q);
  p.k = view_of(f.k);
  p.v = view_of(f.v);
  p.B = static_cast<int>(f.q.B);
  p.Sq = static_cast<int>(f.q.S);
  p.Skv = static_cast<int>(f.k.S);
  p.H = static_cast<int>(f.q.H);
  p.causal = f.causal;
  p.scale = f.softmax_scale > 0 ? f.softmax_scale : 1.f / std::sqrt(static_cast<float>(f.q.D));
  p.rows = a.rows;
  p.n_rows = a.rows ? a.n_rows : p.Sq;
  p.o_out = a.o_out;
  p.lse_out = a.lse_out;
  const int64_t warps = static_cast<int64_t>(p.B) * p.H * p.n_rows;
  const int threads = 256;
  const auto blocks = static_cast<unsigned>((warps * 32 + threads - 1) / threads);
  if (blocks == 0) return;
  if (f.q.D == 64) {
    if (a.emulate_bf16) naive_kernel<64, true><<<blocks, threads, 0, stream>>>(p);
    else naive_kernel<64, false><<<blocks, threads, 0, stream>>>(p);
  } else {
    if (a.emulate_bf16) naive_kernel<128, true><<<blocks, threads, 0, stream>>>(p);
    else naive_kernel<128, false><<<blocks, threads, 0, stream>>>(p);
  }
  XS_CHECK_LAUNCH();
}

void fill_random_bf16(void* dst, int64_t n, uint64_t seed, float stddev, cudaStream_t stream) {
  if (n <= 0) return;
  fill_random_kernel<<<fill_blocks(n), 256, 0, stream>>>(static_cast<__nv_bfloat16*>(dst), n, seed, stddev);
  XS_CHECK_LAUNCH();
}

void fill_bf16_bits(void* dst, int64_t n, uint16_t bits, cudaStream_t stream) {
  if (n <= 0) return;
  fill_bits_kernel<<<fill_blocks(n), 256, 0, stream>>>(static_cast<uint16_t*>(dst), n, bits);
  XS_CHECK_LAUNCH();
}

void fill_f32(float* dst, int64_t n, float value, cudaStream_t stream) {
  if (n <= 0) return;
  fill_f32_kernel<<<fill_blocks(n), 256, 0, stream>>>(dst, n, value);
  XS_CHECK_LAUNCH();
}

}  // namespace xstage::attention
