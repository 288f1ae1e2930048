// Expert-parallel MoE, the problem: shapes, tile constants, validation; bf16 on the host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "xstage/moe/order.hpp"
#include "xstage/sync/bf16.hpp"

namespace xstage::moe {

// ============================================================================
// bf16 on the host (round to nearest even; NaN stays NaN)
// ============================================================================

using bf16_bits = std::uint16_t;
using sync::from_bf16;  // round to nearest even, NaN kept (xstage/sync/bf16.hpp)
using sync::to_bf16;
inline float round_bf16(float f) { return from_bf16(to_bf16(f)); }

// ============================================================================
// Problem
// ============================================================================

// Tiles of the fused kernel (TMA + wgmma, docs/xstage-moe.md "The kernel").
// One CTA tile is kTileM token rows, split over two consumer warpgroups (64 rows
// each, the wgmma M). Both tile kinds hold 2 x 128 fp32 columns per warpgroup and
// load three 128 x 64 boxes per K step:
//   L1: 128 columns of I, gate and up together (A = recv rows, B = 128 gate rows
//       + 128 up rows of W1), SwiGLU in the epilogue;
//   L2: 256 columns of hidden (A = H rows, B = two 128-row halves of W2).
inline constexpr int kTileM = 128;    // token rows per tile
inline constexpr int kL1TileN = 128;  // L1 output columns (of I) per tile: 128 gate + 128 up
inline constexpr int kL2TileN = 256;  // L2 output columns (of hidden) per tile
inline constexpr int kTileK = 64;     // reduction step: one 128-byte swizzle panel of bf16
inline constexpr int kBoxRows = 128;  // rows of every TMA box (A: tokens, B: weight rows)
// hidden must be a multiple of the L2 tile, intermediate of the L1 tile (and both
// of kTileK, which they are).
inline constexpr int kHiddenQuantum = kL2TileN;
inline constexpr int kInterQuantum = kL1TileN;

struct Problem {
  int ranks = 2;              // P, one per GPU
  int tokens_per_rank = 128;  // T
  int experts = 8;            // E (global)
  int topk = 2;               // k
  int hidden = 256;
  int intermediate = 128;     // I
  int experts_per_rank() const { return experts / ranks; }
};

// Throws common::Error with a one-line message naming the field and the rule.
// visible_gpus < 0 skips the GPU-count check (host-only use).
void validate(const Problem& p, int visible_gpus = -1);
std::string describe(const Problem& p);  // "P2 T128 E8 k2 h256 I128"


}  // namespace xstage::moe
