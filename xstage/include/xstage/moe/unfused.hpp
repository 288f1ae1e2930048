// The unfused EP MoE path: NCCL all-to-all-v dispatch, cuBLAS grouped GEMM over the
// experts (cublasGemmGroupedBatchedEx, one launch per layer), a SwiGLU kernel, a
// second grouped GEMM, NCCL all-to-all-v combine, weighted sum. It is both the
// reference path on the GPU and the baseline the fused kernel is timed against. If
// cuBLAS refuses the grouped call for these types, the layer falls back to one
// cublasGemmEx per expert and says so (gemm_path()). The bench asks for the faster
// of the two (choose_gemm_path): on the H200 with CUDA 13.0 the grouped call ran at
// 170-295 TFLOP/s where the per-expert loop had run at 350-665 (docs/xstage-moe.md),
// and a baseline slower than cuBLAS can be would flatter the fused kernel.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "xstage/moe/moe.hpp"

namespace xstage::comm {
class Rank;
}

namespace xstage::moe {

// Small kernels (moe_unfused.cu).
void fill_random_bf16(std::uint16_t* p, std::size_t n, std::uint64_t seed, float scale, cudaStream_t s);
void gather_rows(std::uint16_t* dst, const std::uint16_t* src, const int* idx, int rows, int cols, cudaStream_t s);
void scatter_rows(std::uint16_t* dst, const std::uint16_t* src, const int* idx, int rows, int cols, cudaStream_t s);
// h[r, j] = bf16(silu(g[r, j]) * g[r, I + j]) in fp32, g bf16 [rows, 2I].
void swiglu(std::uint16_t* h, const std::uint16_t* g, int rows, int inter, cudaStream_t s);
// out[t] = bf16(sum_k w[t,k] * comb[t*k + j]) in fp32, slot order.
void weighted_combine(std::uint16_t* out, const std::uint16_t* comb, const float* w, int tokens, int topk, int hidden,
                      cudaStream_t s);

struct UnfusedTimes {
  float total_us = 0;  // dispatch .. combine
  float gemm_us = 0;   // the per-expert GEMMs and SwiGLU only (grouped-GEMM rate)
};

class UnfusedMoe {
 public:
  UnfusedMoe(comm::Rank& rank, const Problem& p, const Layout& layout, const std::uint16_t* w1,
             const std::uint16_t* w2, const std::uint16_t* x, const float* weight_device);
  ~UnfusedMoe();
  UnfusedMoe(const UnfusedMoe&) = delete;
  UnfusedMoe& operator=(const UnfusedMoe&) = delete;
  UnfusedTimes forward();          // on rank.stream(); synchronises to read the events
  std::uint16_t* out() const;      // device [T, hidden]
  // "grouped" (cublasGemmGroupedBatchedEx) or "per-expert loop (grouped GEMM refused: cuBLAS status N)",
  // "per-expert loop" when forced, and after choose_gemm_path the choice with both times.
  const std::string& gemm_path() const;
  // One cublasGemmEx per expert from now on (true), or the grouped call if cuBLAS takes it (false).
  void force_per_expert_loop(bool on);
  // Runs `trials` forwards with each GEMM form (grouped, per-expert loop), keeps the one
  // whose median GEMM time is lower. Collective like forward(): every rank calls it.
  void choose_gemm_path(int trials);

  // The two expert GEMMs alone (L1 over the received rows into G, L2 over H into Y; bf16
  // out, fp32 accumulation), without dispatch, SwiGLU or combine: the cuBLAS roofline a
  // fused layer is compared against. `batched` is one cublasGemmStridedBatchedEx per
  // layer with every local expert given the mean row count (what torch.bmm of the
  // stacked experts runs; the same FLOPs as the exact counts), offered only when the
  // rows split evenly; `grouped` and `per_expert_loop` take the exact counts.
  enum class GemmForm { batched, grouped, per_expert_loop };
  std::vector<GemmForm> gemm_forms() const;  // the forms these shapes and this cuBLAS allow
  void expert_gemms(GemmForm form);          // enqueues them on rank.stream()
  static const char* name(GemmForm form);

 private:
  struct Impl;
  static void layer_gemms(Impl& m, int layer, GemmForm form);
  Impl* impl_;
};

}  // namespace xstage::moe
