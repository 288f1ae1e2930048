// Online softmax on wgmma accumulator fragments (one consumer warpgroup, 64 rows).
//
// Fragment convention (m64nN f32 accumulator, per thread): warp w of the
// warpgroup owns rows 16w..16w+15; lane = 4g + t. Element i = 4·jj + e
// (jj = 0..N/8-1, e = 0..3) sits at row 16w + g + 8·(e >> 1), column
// 8·jj + 2·t + (e & 1). So each thread holds two rows ("a" = g, "b" = g + 8);
// a row is spread over the 4 lanes of a quad.
//
// Scores stay raw (Q·K) until the exponent: p = exp2(s·scale_log2 − m·scale_log2),
// one FFMA and one MUFU.EX2 per element. Row maxima are reduced over the quad at
// every step; row sums stay per-thread partials until finalize().
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "xstage/attention/tiles.hpp"
#include "xstage/sync/bf16.hpp"

namespace xstage::attention::sm90 {

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

inline constexpr float kNegInf = -__builtin_huge_valf();

// Sets masked scores to -inf. n0: first key of the block; row_a/row_b: the
// thread's two query rows (global indices); t: lane % 4.
template <int N>
__device__ __forceinline__ void apply_mask(float (&s)[N / 2], const MaskInfo& mask, int n0, int row_a, int row_b,
                                           int t) {
#pragma unroll
  for (int jj = 0; jj < N / 8; ++jj)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int col = n0 + 8 * jj + 2 * t + (e & 1);
      const int row = (e >> 1) ? row_b : row_a;
      if (!mask.visible(row, col)) s[4 * jj + e] = kNegInf;
    }
}

// P (fp32, in the S fragment) -> bf16 A fragments of the P·V wgmma: k-step kk
// covers keys 16kk..16kk+15, whose accumulator elements 8kk..8kk+7 are exactly
// the A-fragment order (a0a1: row g; a2a3: row g+8; a4a5: row g, +8 cols; a6a7).
template <int N>
__device__ __forceinline__ void convert_p(const float (&s)[N / 2], uint32_t (&pa)[N / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < N / 16; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) pa[kk][r] = sync::pack_bf16x2(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
}

// Multiplies the O fragment's two rows by per-row factors.
template <int D>
__device__ __forceinline__ void scale_rows(float (&o)[D / 2], const float (&f)[2]) {
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] *= f[(i >> 1) & 1];
}

template <int N>
struct OnlineSoftmax {
  float row_max[2];  // raw-score max of rows a, b; -inf before any visible key
  float row_sum[2];  // this thread's partial sum of p (quad-reduced in finalize)
  float scale_log2;  // softmax scale · log2(e)

  __device__ __forceinline__ void init(float sl2) {
    row_max[0] = row_max[1] = kNegInf;
    row_sum[0] = row_sum[1] = 0.f;
    scale_log2 = sl2;
  }

  // One K/V block: s holds raw scores (masked ones -inf). Turns s into
  // unnormalised probabilities in place and returns the factor by which O must
  // be rescaled for the new row maxima.
  __device__ __forceinline__ void step(float (&s)[N / 2], float (&rescale)[2]) {
    float mx[2] = {row_max[0], row_max[1]};
#pragma unroll
    for (int i = 0; i < N / 2; ++i) mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], s[i]);
    float base[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      // A row with no visible key so far keeps max -inf: use 0 as the exponent
      // base so exp2(-inf - base) = 0 instead of NaN.
      base[r] = mx[r] == kNegInf ? 0.f : mx[r] * scale_log2;
      rescale[r] = ex2(row_max[r] * scale_log2 - base[r]);  // old max -inf -> 0 (O and sum are 0 then)
      row_max[r] = mx[r];
    }
    float sum[2] = {0.f, 0.f};
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      const int r = (i >> 1) & 1;
      s[i] = ex2(fmaf(s[i], scale_log2, -base[r]));
      sum[r] += s[i];
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) row_sum[r] = row_sum[r] * rescale[r] + sum[r];
  }

  // 1/sum per row (0 for a row that saw no key) and the natural-log LSE.
  __device__ __forceinline__ void finalize(float (&inv)[2], float (&lse)[2]) const {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float s = row_sum[r];
      s += __shfl_xor_sync(0xffffffffu, s, 1);
      s += __shfl_xor_sync(0xffffffffu, s, 2);
      const bool any = s > 0.f;
      inv[r] = any ? 1.f / s : 0.f;
      constexpr float kLn2 = 0.6931471805599453f;
      lse[r] = any ? (row_max[r] * scale_log2 + __log2f(s)) * kLn2 : kNegInf;
    }
  }
};

}  // namespace xstage::attention::sm90
