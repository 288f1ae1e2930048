// Grouped rasterisation of a GEMM's output tiles, shared by the persistent
// kernels whose host code lays out a tile order (the fused MoE's per-expert tile
// lists, the fused QKV projection's order). Host only, CPU-tested.
//
// A persistent kernel on `grid` CTAs runs about `grid` tiles at once. In m-major
// order (every column tile of one m block, then the next m block) those tiles
// span a few m blocks and every column tile, so each round streams the whole B
// operand; once B is larger than L2, it comes from HBM again in every round.
// Grouped order walks groups of G consecutive m blocks column by column, m
// fastest: a round then touches G A-blocks and about grid/G B-tiles, and the G
// A-blocks stay in L2 while the group's columns go by.
//
// The group: per round the distinct bytes are about G·a + (grid/G)·b, with a and
// b the bytes one A block and one B tile read over the full K; that is smallest at
// G = sqrt(grid·b/a) (16 for 128 × 256 tiles on 132 SMs), clamped to [1, m_blocks].
#pragma once

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "common/check.hpp"

namespace xstage {

// The group size above; a_bytes, b_bytes > 0.
inline int raster_group(int grid, int m_blocks, double a_bytes, double b_bytes) {
  XS_ASSERT(grid >= 1 && m_blocks >= 0 && a_bytes > 0 && b_bytes > 0,
            "raster_group: grid {} must be >= 1, m_blocks {} >= 0 and the byte counts positive", grid, m_blocks);
  const int g = static_cast<int>(std::lround(std::sqrt(grid * b_bytes / a_bytes)));
  return std::clamp(g, 1, std::max(1, m_blocks));
}

// Calls f(m, c) for every m in [0, m_blocks) and every column c of `cols` (column
// tiles in the order wanted within a group), in grouped order with groups of
// `group` m blocks. group 1 (or <= 0) is m-major order; group >= m_blocks is
// column-major order.
template <class F>
void for_each_grouped(int m_blocks, const std::vector<int>& cols, int group, F&& f) {
  const int g = std::max(1, group);
  for (int m0 = 0; m0 < m_blocks; m0 += g) {
    const int m1 = std::min(m_blocks, m0 + g);
    for (int c : cols)
      for (int m = m0; m < m1; ++m) f(m, c);
  }
}

// The same with columns 0 .. n_blocks-1 in order.
template <class F>
void for_each_grouped(int m_blocks, int n_blocks, int group, F&& f) {
  std::vector<int> cols(static_cast<std::size_t>(std::max(0, n_blocks)));
  for (int c = 0; c < n_blocks; ++c) cols[static_cast<std::size_t>(c)] = c;
  for_each_grouped(m_blocks, cols, group, std::forward<F>(f));
}

}  // namespace xstage
