// Forward attention O = softmax(Q Kᵀ · scale) V: the host-side contract.
//
// This header has no CUDA dependency: shape validation, the launch-config
// heuristic and the CPU reference build and test everywhere. The launcher is in
// xstage/attention/attention_cuda.hpp; the kernel in xstage/attention/sm90_flash_fwd.cuh.
//
// Layout: every tensor is [B, S, H, D] with explicit element strides (the last
// dimension contiguous). Q and O have S = Sq rows; K and V have S = Skv rows.
// Causal masking is bottom-right aligned (the FlashAttention convention): query
// i sees keys j <= i + (Skv - Sq); with Sq == Skv that is plain lower-triangular.
// A query row that sees no key gets O = 0 and LSE = -inf.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "xstage/attention/tiles.hpp"
#include "xstage/sync/bf16.hpp"

namespace xstage::attention {

enum class DType : int { bf16, fp16, fp32 };
const char* dtype_name(DType t);

// [B, S, H, D] view with element strides.
struct Tensor4 {
  void* data = nullptr;
  DType dtype = DType::bf16;
  int64_t B = 0, S = 0, H = 0, D = 0;
  int64_t stride_b = 0, stride_s = 0, stride_h = 0, stride_d = 1;

  // Densely packed [B, S, H, D].
  static Tensor4 bshd(void* data, int64_t B, int64_t S, int64_t H, int64_t D, DType t = DType::bf16) {
    return {data, t, B, S, H, D, S * H * D, H * D, D, 1};
  }
};

struct FwdArgs {
  Tensor4 q;                 // [B, Sq, H, D] bf16
  Tensor4 k;                 // [B, Skv, H, D] bf16
  Tensor4 v;                 // [B, Skv, H, D] bf16
  Tensor4 o;                 // [B, Sq, H, D] bf16, written
  float* lse = nullptr;      // optional [B, H, Sq] fp32 (dense), natural-log log-sum-exp of scaled scores
  bool causal = false;       // bottom-right aligned (see above)
  float softmax_scale = 0;   // 0 means 1/sqrt(D)
};

// The validated problem.
struct Problem {
  int64_t B = 0, Sq = 0, Skv = 0, H = 0, D = 0;
  bool causal = false;
  bool has_lse = false;
  float scale = 0;  // resolved softmax scale
};

// Checks everything the kernel relies on and throws common::Error with a
// message naming the tensor and the rule: dtype bf16, D in {64, 128}, matching
// B/H/D/S, last stride 1, other strides multiples of 8 elements (16 bytes, for
// TMA and 16-byte stores), 16-byte aligned bases, sizes within int32.
Problem validate(const FwdArgs& args);

// Launch configuration, chosen on the host (plain data; see choose_config for
// the reasons). XSTAGE_PRINT_CONFIG=1 prints it once per distinct choice.
struct FwdConfig {
  int head_dim = 0;
  int block_m = 0;        // query rows per CTA tile = consumer warpgroups x 64 (wgmma M)
  int block_n = 0;        // keys per K/V pipeline stage
  int stages = 0;         // K/V pipeline depth
  int consumer_wgs = 0;   // MMA + softmax warpgroups; one more (producer) warpgroup issues TMA
  int threads = 0;        // 128 x (consumer_wgs + 1)
  int smem_bytes = 0;     // dynamic shared memory per CTA
  int grid = 0;           // persistent CTAs (<= SM count)
  TileSpace tiles{};      // work decomposition and its order
  bool snake = false;     // boustrophedon rounds of the persistent scheduler
  bool pingpong = false;  // consumer warpgroups take turns issuing their MMAs
};

// Overrides of the heuristic (tests and benchmarks compare variants with them).
struct FwdOptions {
  int max_ctas = 0;       // 0: one CTA per SM; >0 caps the persistent grid (tests use this to force several tiles per CTA)
  int pingpong = -1;      // -1: heuristic; 0: off; 1: consumers take turns issuing MMAs
  int snake = -1;         // -1: heuristic; 0: off; 1: boustrophedon scheduler rounds
  int head_group = -1;    // causal: heads per longest-first section; -1: heuristic; 0: all heads;
                          // -2: sections of about 8 grid rounds each (L2-friendlier, worse balance)
};

// Shared memory the kernel needs for head dim D (the kernel's own traits agree;
// a test checks it against sm90_flash_fwd.cuh).
int smem_bytes_for(int head_dim);
FwdConfig choose_config(const Problem& p, int sm_count, const FwdOptions& opt = {});
std::string describe(const FwdConfig& c);
// Prints describe(c) to stderr when XSTAGE_PRINT_CONFIG=1, once per distinct text.
void maybe_print_config(const FwdConfig& c);

// Floating-point operations of the forward pass as the benchmarks count them:
// 4·Sq·Skv·D·H·B, halved for causal (Sq == Skv).
double fwd_flops(const Problem& p);

// ---- CPU reference (fp64 accumulation over the given float inputs) ----------
// Inputs are dense [B, S, H, D] float arrays (bf16 values widened to float);
// outputs dense [B, Sq, H, D] and [B, H, Sq].
struct RefResult {
  std::vector<double> o;
  std::vector<double> lse;
};
RefResult reference_fwd(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                        int64_t B, int64_t Sq, int64_t Skv, int64_t H, int64_t D, bool causal, double scale);

// bf16 <-> float on the host (round to nearest even; NaN stays NaN).
inline uint16_t float_to_bf16_bits(float f) { return sync::to_bf16(f); }  // xstage/sync/bf16.hpp
inline float bf16_bits_to_float(uint16_t b) { return sync::from_bf16(b); }

}  // namespace xstage::attention
