// Launchers of xstage/attention (CUDA builds). Validation errors throw
// common::Error before anything is launched.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "xstage/attention/attention.hpp"

namespace xstage::attention {

// O = softmax(Q Kᵀ · scale) V (+ LSE) with the sm_90a kernel, local-store epilogue.
// Returns the configuration it launched.
FwdConfig flash_fwd(const FwdArgs& args, cudaStream_t stream = nullptr, const FwdOptions& opt = {});
// The same with a given configuration (from choose_config, possibly with another tile
// order: the Ulysses bench times attention alone in the fused kernel's order).
void flash_fwd_with(const FwdArgs& args, const FwdConfig& cfg, cudaStream_t stream = nullptr);

// GPU naive reference, one warp per query row, fp32 arithmetic on the bf16
// inputs; two passes (exact max, then sums). emulate_bf16 rounds P to bf16
// before P·V and O to bf16 at the end, as a bf16 flash kernel does: its error
// against a higher-precision reference is the yardstick for ours.
// rows == nullptr: every query row; else `n_rows` query indices (device array),
// computed for every (batch, head). Outputs are dense fp32:
// o_out [B, n_rows, H, D], lse_out [B, H, n_rows] (may be nullptr).
struct NaiveArgs {
  FwdArgs fwd;                 // q, k, v, causal, softmax_scale (o and lse unused)
  const int* rows = nullptr;
  int n_rows = 0;              // with rows == nullptr: Sq
  float* o_out = nullptr;
  float* lse_out = nullptr;
  bool emulate_bf16 = false;
};
void naive_attention(const NaiveArgs& a, cudaStream_t stream = nullptr);

// After a failed synchronisation: which device wait timed out (kernel, block, thread,
// barrier, stage, parity; sync::take_report), or "" when none did. Clears it.
std::string explain_device_failure();

// Device fills for tests and benchmarks.
void fill_random_bf16(void* dst, int64_t n, uint64_t seed, float stddev, cudaStream_t stream = nullptr);
void fill_bf16_bits(void* dst, int64_t n, uint16_t bits, cudaStream_t stream = nullptr);
void fill_f32(float* dst, int64_t n, float value, cudaStream_t stream = nullptr);

}  // namespace xstage::attention
