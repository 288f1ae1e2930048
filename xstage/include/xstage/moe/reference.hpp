// Expert-parallel MoE, host reference (small shapes): random weights and tokens, the
// fp64 forward through the layout and a token-by-token check of it.
#pragma once

#include <cstdint>
#include <vector>

#include "xstage/moe/layout.hpp"

namespace xstage::moe {

// ============================================================================
// Host reference (small shapes)
// ============================================================================

// Weights of every rank: w1[r] = [E/P, 2I, hidden], w2[r] = [E/P, hidden, I] (bf16).
struct Weights {
  std::vector<std::vector<bf16_bits>> w1, w2;
};
Weights random_weights(const Problem& p, std::uint64_t seed, float scale = 0.05f);
std::vector<std::vector<bf16_bits>> random_tokens(const Problem& p, std::uint64_t seed, float scale = 1.0f);

// dispatch -> W1 gate/up -> SwiGLU -> W2 -> weighted combine, through the layout,
// accumulating in fp64 and rounding to bf16 where the kernel stores bf16 (H, comb,
// out). Returns out[r] = [T, hidden] as float (exact bf16 values).
std::vector<std::vector<float>> reference_forward(const Problem& p, const std::vector<Routing>& routing,
                                                  const Layout& layout, const Weights& w,
                                                  const std::vector<std::vector<bf16_bits>>& x);
// Token by token, no layout (for testing the one above).
std::vector<std::vector<float>> naive_forward(const Problem& p, const std::vector<Routing>& routing, const Weights& w,
                                              const std::vector<std::vector<bf16_bits>>& x);


}  // namespace xstage::moe
