// Small elementwise and row kernels of the DiT block: bias + activation, LayerNorm +
// adaLN modulation (alone, or after the gated residual of an fp32 or bf16 branch, in
// one pass over the row), RMSNorm + RoPE of Q and K, conversions. With
// Config::gemm_epilogues the GELU MLP's fc1 bias + GELU runs in cuBLASLt's epilogue
// instead (lt_gemm.cpp).
#include <cuda_bf16.h>

#include "common/cuda_check.hpp"
#include "xstage/dit/dit_cuda.hpp"

namespace xstage::dit::kernels {

namespace {
constexpr int kThreads = 256;
constexpr float kNormEps = 1e-6f;

int grid_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return int(b < 4096 ? (b > 0 ? b : 1) : 4096);  // grid-stride loops beyond this
}

__device__ float activate(float v, Act a) {
  if (a == Act::silu) return v / (1.f + __expf(-v));
  if (a == Act::gelu_tanh) {
    const float k = 0.7978845608028654f;  // sqrt(2 / pi)
    return 0.5f * v * (1.f + tanhf(k * (v + 0.044715f * v * v * v)));
  }
  return v;
}

__global__ void bias_act_kernel(float* y, __nv_bfloat16* out, const float* b, int64_t rows, int64_t n, Act act) {
  const int64_t total = rows * n;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = activate(y[i] + (b ? b[i % n] : 0.f), act);
    if (out) out[i] = __float2bfloat16_rn(v);
    else y[i] = v;
  }
}

// Sum over the block (kThreads threads); every thread gets the result.
__device__ float block_sum(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // scratch may still be read from a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float s = 0;
  for (int w = 0; w < kThreads / 32; ++w) s += scratch[w];
  return s;
}

__device__ float load_f32(float v) { return v; }
__device__ float load_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

// One block per row: optionally the gated residual x += gate ⊙ (y + b) first (writing x),
// then LN's mean and variance (two passes over the row, fp32) and h = LN(x) ⊙ (1 + scale)
// + shift in bf16. Each thread reads back only the x values it wrote itself.
template <class Y>
__global__ void ln_modulate_kernel(__nv_bfloat16* h, float* x, const Y* y, const float* b, const float* gate,
                                   const float* shift, const float* scale, int64_t C) {
  __shared__ float scratch[kThreads / 32];
  float* xr = x + blockIdx.x * C;
  float s = 0;
  if (y) {
    const Y* yr = y + blockIdx.x * C;
    for (int64_t j = threadIdx.x; j < C; j += kThreads) {
      const float v = xr[j] + gate[j] * (b ? load_f32(yr[j]) + b[j] : load_f32(yr[j]));
      xr[j] = v;
      s += v;
    }
  } else {
    for (int64_t j = threadIdx.x; j < C; j += kThreads) s += xr[j];
  }
  const float mean = block_sum(s, scratch) / float(C);
  float v = 0;
  for (int64_t j = threadIdx.x; j < C; j += kThreads) v += (xr[j] - mean) * (xr[j] - mean);
  const float inv = rsqrtf(block_sum(v, scratch) / float(C) + kNormEps);
  __nv_bfloat16* hr = h + blockIdx.x * C;
  for (int64_t j = threadIdx.x; j < C; j += kThreads)
    hr[j] = __float2bfloat16_rn((xr[j] - mean) * inv * (1.f + scale[j]) + shift[j]);
}

// One warp per (row, head, part); part 0 = q, 1 = k (RMSNorm + RoPE), 2 = v (bias only).
// Lane l holds the pairs l, l + 32 (D/2 <= 64 pairs), i.e. elements 2j and 2j + 1.
__global__ void qk_norm_rope_kernel(__nv_bfloat16* q, __nv_bfloat16* k, __nv_bfloat16* v, const float* qkv,
                                    const float* bias, const float* q_norm, const float* k_norm, const float* cs,
                                    const float* sn, int64_t rows, int64_t H, int64_t D) {
  const int64_t warp = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= rows * H * 3) return;
  const int part = int(warp % 3);
  const int64_t head = (warp / 3) % H, row = warp / (3 * H), C = H * D, pairs = D / 2;
  const float* src = qkv + row * 3 * C + part * C + head * D;
  const float* bsrc = bias + part * C + head * D;
  float a[2], b[2];
  float ss = 0;
  for (int i = 0; i < 2; ++i) {
    const int64_t j = lane + 32 * i;
    a[i] = b[i] = 0;
    if (j < pairs) {
      a[i] = src[2 * j] + bsrc[2 * j];
      b[i] = src[2 * j + 1] + bsrc[2 * j + 1];
      ss += a[i] * a[i] + b[i] * b[i];
    }
  }
  __nv_bfloat16* dst = (part == 0 ? q : part == 1 ? k : v) + (row * H + head) * D;
  if (part < 2) {
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float inv = rsqrtf(ss / float(D) + kNormEps);
    const float* w = part == 0 ? q_norm : k_norm;
    for (int i = 0; i < 2; ++i) {
      const int64_t j = lane + 32 * i;
      if (j >= pairs) continue;
      const float x0 = a[i] * inv * w[2 * j], x1 = b[i] * inv * w[2 * j + 1];
      const float c = cs[row * pairs + j], s = sn[row * pairs + j];
      a[i] = x0 * c - x1 * s;
      b[i] = x0 * s + x1 * c;
    }
  }
  for (int i = 0; i < 2; ++i) {
    const int64_t j = lane + 32 * i;
    if (j >= pairs) continue;
    dst[2 * j] = __float2bfloat16_rn(a[i]);
    dst[2 * j + 1] = __float2bfloat16_rn(b[i]);
  }
}

__global__ void to_bf16_kernel(__nv_bfloat16* dst, const float* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = __float2bfloat16_rn(src[i]);
}

__global__ void axpy_kernel(float* x, const float* v, float dt, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] += dt * v[i];
}
}  // namespace

void bias_act(float* y, std::uint16_t* out_bf16, const float* b, int64_t rows, int64_t n, Act act, cudaStream_t s) {
  bias_act_kernel<<<grid_for(rows * n), kThreads, 0, s>>>(y, reinterpret_cast<__nv_bfloat16*>(out_bf16), b, rows, n,
                                                          act);
  XS_CHECK_LAUNCH();
}

namespace {
template <class Y>
void launch_ln_modulate(std::uint16_t* h, float* x, const Y* y, const float* b, const float* gate, const float* shift,
                        const float* scale, int64_t rows, int64_t C, cudaStream_t s) {
  XS_CHECK_MSG(rows < (int64_t(1) << 31), "dit: ln_modulate: too many rows for one grid dimension");
  if (rows == 0) return;
  ln_modulate_kernel<Y><<<unsigned(rows), kThreads, 0, s>>>(reinterpret_cast<__nv_bfloat16*>(h), x, y, b, gate,
                                                            shift, scale, C);
  XS_CHECK_LAUNCH();
}
}  // namespace

void ln_modulate(std::uint16_t* h, const float* x, const float* shift, const float* scale, int64_t rows, int64_t C,
                 cudaStream_t s) {
  // Without a residual branch the kernel only reads x.
  launch_ln_modulate<float>(h, const_cast<float*>(x), nullptr, nullptr, nullptr, shift, scale, rows, C, s);
}

void gated_residual_ln_modulate(float* x, const float* y, const float* b, const float* gate, std::uint16_t* h,
                                const float* shift, const float* scale, int64_t rows, int64_t C, cudaStream_t s) {
  XS_CHECK_MSG(y && b && gate, "dit: gated_residual_ln_modulate needs y, b and gate");
  launch_ln_modulate(h, x, y, b, gate, shift, scale, rows, C, s);
}

void gated_residual_ln_modulate_bf16(float* x, const std::uint16_t* y, const float* gate, std::uint16_t* h,
                                     const float* shift, const float* scale, int64_t rows, int64_t C,
                                     cudaStream_t s) {
  XS_CHECK_MSG(y && gate, "dit: gated_residual_ln_modulate_bf16 needs y and gate");
  launch_ln_modulate(h, x, reinterpret_cast<const __nv_bfloat16*>(y), nullptr, gate, shift, scale, rows, C, s);
}

void qk_norm_rope(std::uint16_t* q, std::uint16_t* k, std::uint16_t* v, const float* qkv, const float* bias,
                  const float* q_norm, const float* k_norm, const float* cos, const float* sin, int64_t rows,
                  int64_t heads, int64_t head_dim, cudaStream_t s) {
  XS_CHECK_MSG(head_dim % 2 == 0 && head_dim <= 128, "dit: qk_norm_rope handles even head_dim up to 128");
  const int64_t warps = rows * heads * 3, blocks = (warps * 32 + kThreads - 1) / kThreads;
  if (warps == 0) return;
  qk_norm_rope_kernel<<<unsigned(blocks), kThreads, 0, s>>>(reinterpret_cast<__nv_bfloat16*>(q),
                                                            reinterpret_cast<__nv_bfloat16*>(k),
                                                            reinterpret_cast<__nv_bfloat16*>(v), qkv, bias, q_norm,
                                                            k_norm, cos, sin, rows, heads, head_dim);
  XS_CHECK_LAUNCH();
}

void to_bf16(std::uint16_t* dst, const float* src, int64_t n, cudaStream_t s) {
  to_bf16_kernel<<<grid_for(n), kThreads, 0, s>>>(reinterpret_cast<__nv_bfloat16*>(dst), src, n);
  XS_CHECK_LAUNCH();
}

void axpy(float* x, const float* v, float dt, int64_t n, cudaStream_t s) {
  axpy_kernel<<<grid_for(n), kThreads, 0, s>>>(x, v, dt, n);
  XS_CHECK_LAUNCH();
}

}  // namespace xstage::dit::kernels
