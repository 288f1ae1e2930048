// The DiT denoiser on GPUs (CUDA builds): small kernels, one rank's model, and
// the sampler over P ranks.
//
// Numerics: weights bf16 (matrices) and fp32 (biases, norm weights); the
// residual stream x and the latent are fp32; GEMM inputs bf16 with fp32
// accumulation and fp32 outputs (cublasGemmEx); attention bf16 through our
// sm_90a kernel (P = 1: flash_fwd; P > 1: the Ulysses layer, serial or fused).
//
// A rank holds tokens [r·N/P, (r+1)·N/P) (dit::shard_of) and replicated weights,
// except the experts of an MoE FFN: E/P per rank (expert parallelism, the fused
// MoE kernel of xstage/moe; its host side in xstage/dit/dit.hpp, "MoE FFN on GPUs").
// Per block, attention needs all tokens: the Ulysses layer's pre-attention
// All-to-All gives each rank H/P heads of all N tokens, and the post-attention
// All-to-All (serial: NCCL after the kernel; fused: stores from the attention
// epilogue) returns [L, H, D] of the rank's own tokens.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "xstage/burstgap/burstgap.hpp"
#include "xstage/dit/dit.hpp"

namespace xstage::comm {
class Rank;
}
namespace xstage::ulysses {
class Layer;
}

namespace xstage::dit {

// ---- kernels (dit_kernels.cu); bf16 as uint16_t bits; all on `s` ------------------
namespace kernels {
enum class Act { none, silu, gelu_tanh };
// act(y[r, j] + b[j]) to out_bf16 when non-null, else in place to y (fp32). b may be null.
void bias_act(float* y, std::uint16_t* out_bf16, const float* b, int64_t rows, int64_t n, Act act, cudaStream_t s);
// h[r, :] = bf16(LN(x[r, :]) * (1 + scale) + shift), LN without affine, eps 1e-6.
void ln_modulate(std::uint16_t* h, const float* x, const float* shift, const float* scale, int64_t rows, int64_t C,
                 cudaStream_t s);
// From qkv [rows, 3C] fp32 (+ bias [3C]): q, k = RoPE(RMSNorm(. ) * weight), v; each [rows, H, D] bf16.
// cos, sin: [rows, D/2]. D in {64, 128}.
void qk_norm_rope(std::uint16_t* q, std::uint16_t* k, std::uint16_t* v, const float* qkv, const float* bias,
                  const float* q_norm, const float* k_norm, const float* cos, const float* sin, int64_t rows,
                  int64_t heads, int64_t head_dim, cudaStream_t s);
// The gated residual, then ln_modulate of the new x, in one kernel (one read of the row):
// x[r, j] += gate[j] * (y[r, j] + b[j]); h = ln_modulate(x). The same fp32 operations in
// the same order as the two steps apart.
void gated_residual_ln_modulate(float* x, const float* y, const float* b, const float* gate, std::uint16_t* h,
                                const float* shift, const float* scale, int64_t rows, int64_t C, cudaStream_t s);
// The same with a bf16 branch and no bias (the fused MoE kernel's output): x += gate * y.
void gated_residual_ln_modulate_bf16(float* x, const std::uint16_t* y, const float* gate, std::uint16_t* h,
                                     const float* shift, const float* scale, int64_t rows, int64_t C,
                                     cudaStream_t s);
void to_bf16(std::uint16_t* dst, const float* src, int64_t n, cudaStream_t s);
// x += dt * v.
void axpy(float* x, const float* v, float dt, int64_t n, cudaStream_t s);
}  // namespace kernels

// Y [M, N] fp32 = X [M, K] bf16 · W [N, K]ᵀ (row-major) with cuBLAS, bf16 in, fp32
// accumulate: every GEMM of the model (and the QKV bench's baseline).
void gemm_bf16_f32(cublasHandle_t blas, const std::uint16_t* X, const std::uint16_t* W, float* Y, int64_t M,
                   int64_t N, int64_t K);

// A GEMM with its tail in cuBLASLt's epilogue (lt_gemm.cpp), for one shape:
// out = tail(X [M, K] · W [N, K]ᵀ + bias) (row-major, bf16 in, fp32 accumulate), tail the
// identity (LtTail::bias: the attention projection and fc2, whose bf16 output goes to
// gated_residual_ln_modulate_bf16) or gelu_tanh (LtTail::bias_gelu: the GELU MLP's fc1);
// out bf16 with a bf16 bias, or fp32 with an fp32 bias (cuBLASLt's bias has D's type).
// One kernel instead of the GEMM's fp32 [M, N] output and a pass of another kernel over
// it. The algorithm is cuBLASLt's heuristic choice, made once here; supported() is false
// when it offers none (the caller then runs gemm_bf16_f32 and its own tail). Every
// operand is 16-byte aligned; workspace holds workspace_bytes.
enum class LtTail { bias, bias_gelu };
class BiasGemm {
 public:
  BiasGemm(cublasLtHandle_t lt, LtTail tail, int64_t M, int64_t N, int64_t K, cudaDataType out_type,
           std::size_t workspace_bytes);
  ~BiasGemm();
  BiasGemm(const BiasGemm&) = delete;
  BiasGemm& operator=(const BiasGemm&) = delete;
  bool supported() const { return supported_; }
  std::string describe() const;  // "bias + GELU GEMM M 4096 N 12288 K 3072 -> bf16"
  // Enqueued on s; throws when !supported().
  void run(const std::uint16_t* X, const std::uint16_t* W, void* out, const void* bias, void* workspace,
           cudaStream_t s) const;

 private:
  cublasLtHandle_t lt_;
  LtTail tail_;
  int64_t m_, n_, k_;
  cudaDataType out_type_;
  std::size_t workspace_bytes_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  bool supported_ = false;
};
// cuBLAS's recommended workspace on Hopper.
inline constexpr std::size_t kLtWorkspaceBytes = std::size_t(32) << 20;

enum class AttnPath { single, serial, fused };
const char* to_string(AttnPath p);

// Times of the MoE FFN per block (dit_moe_ffn.hpp), summed over forwards.
// Host routing only, the host's round trip: wait = the stream synchronisation that
// brings the router logits to the host (it also waits for the GPU work queued
// before them); route = routing, layout and tile order on the host; upload = the
// kernel's inputs copied to the device and the launch. Between the synchronisation
// and the launch the stream has nothing queued, so route + upload is time the GPU
// idles. Both modes, on the GPU (CUDA events on the rank's stream): plan_gpu = top-k,
// gathered experts, layout and order (routing on the GPU; 0 with host routing);
// kernel_gpu = the fused MoE kernel with its counter resets.
struct MoeTimes {
  double wait_us = 0, route_us = 0, upload_us = 0;
  long forwards = 0;
  double plan_gpu_us = 0, kernel_gpu_us = 0;
  MoeTimes per_forward() const;  // the sums divided by forwards (all zero when none)
};

// One rank's denoiser: weights, activations and the cuBLAS handle on the current
// device. The ranks hold `padded` tokens (dit::padded_tokens; 0: g.tokens(), no
// padding), L = padded / P each (shard_of). `layer` (P > 1) is the Ulysses layer
// of this rank, built by the caller for Problem{P, 1, padded, heads, head_dim,
// false, g.tokens()}; with P = 1 it is null. An MoE FFN
// (c.ffn == moe) also needs `comm`, this rank's communicator (whose stream must
// be `stream`), and `moe_params`, the Burst-Gap parameters of its schedule; the
// constructor is then collective (the fused MoE kernel's window), and this rank
// holds only its E/P experts of each block.
class RankModel {
 public:
  RankModel(const Config& c, int blocks, const Grid& g, int ranks, int rank, cudaStream_t stream,
            ulysses::Layer* layer, comm::Rank* comm = nullptr, const burstgap::ModelParams* moe_params = nullptr,
            int64_t padded = 0);
  ~RankModel();
  RankModel(const RankModel&) = delete;
  RankModel& operator=(const RankModel&) = delete;

  void load(const Weights& w);       // host weights (every rank loads the same; keeps its expert shard)
  // Matrices drawn on the device (expert tensors per expert, so an expert's values
  // do not depend on P), the rest on the host: the same model on every rank.
  void randomize(uint64_t seed);
  // This rank's [L, in_dim], padding rows included; waits for the stream first, and the
  // copy has landed on return.
  void set_latent(const std::vector<float>& local);
  // Waits for the stream; throws one line naming a timed-out wait of the MoE kernel
  // or non-finite router logits (MoE FFN), or the CUDA error.
  void synchronize() const;
  std::vector<float> latent() const;                 // synchronises
  std::vector<float> velocity() const;               // of the last forward (bias included); synchronises

  void forward(float t, AttnPath path);              // v = model(x, t), enqueued on the stream
  void euler(float dt);                              // x += dt * v
  int64_t local_tokens() const;
  // Breakdown: with it on, each forward records a CUDA event at its start and at the end
  // of each phase (Phase, xstage/dit/dit.hpp); add_breakdown waits for the last forward's
  // events and adds its phases to t. Off by default (the events cost a little host time).
  void set_breakdown(bool on);
  void add_breakdown(PhaseTimes& t);
  // How the GEMM tails run (Config::gemm_epilogues): "fused" (every one in a cuBLASLt
  // epilogue: the projection's and fc2's bias, fc1's bias + GELU), "separate", or "fused
  // except ..." naming the GEMMs cuBLASLt offered no algorithm for (they run separately).
  std::string gemm_epilogues() const;
  // How the QKV projection runs: "fused" (P = 1 with Config::gemm_epilogues and D = 128: the
  // fused QKV kernel, every head local), "cuBLAS + qk_norm_rope", or per path at P > 1.
  std::string qkv_projection() const;
  // The MoE FFN's times (MoeTimes: host round trips with host routing, GPU planner and
  // kernel in both modes) since the last reset; all zero without an MoE FFN.
  MoeTimes moe_host_times() const;
  void reset_moe_host_times();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- the sampler over P GPUs ----------------------------------------------------
struct GpuOptions {
  uint64_t weight_seed = 1, latent_seed = 2;
  const Weights* weights = nullptr;  // host weights (tiny presets, safetensors); else random on the device
  std::string params;                // Burst-Gap parameters for the Ulysses layer and the MoE schedule
                                     // (default: xstage/data/h200_params.json)
  int warmup = 2, samples = 5;       // timing: per rank, the same count on every rank
  bool time = true;
  bool progress = false;
  int breakdown_steps = 0;           // > 0: that many more steps after the timed ones, with phase events
};
struct GpuResult {
  std::vector<float> first_velocity;  // v(x_1, t = 1), all tokens [N, in_dim]
  std::vector<float> latent;          // after run.steps Euler steps, all tokens
  double step_ms = 0;                 // median per-step latency of the slowest rank (0 when !time)
  MoeTimes moe_host;              // MoE presets, timed steps: per forward of one block's FFN, slowest rank
  std::string gemm_epilogues;     // rank 0's RankModel::gemm_epilogues()
  std::string qkv_projection;     // rank 0's RankModel::qkv_projection()
  PhaseTimes phases;              // breakdown_steps > 0: the phases of the rank whose steps took longest
};
// Runs the sampler on GPUs 0 .. P-1 (P = run.ranks; one thread per rank). P = 1
// needs path == single; P > 1 serial or fused. MoE presets run their FFN through
// the fused MoE kernel on every path (P = 1 too). Throws (one line) on bad input.
GpuResult run_gpu(const Config& c, const Run& run, AttnPath path, const GpuOptions& opt);

}  // namespace xstage::dit
