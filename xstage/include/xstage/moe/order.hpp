// The fused MoE schedulers' order (xstage/moe/schedule.cpp) in closed form, for host
// and device: where in the global order each tile goes, so that a GPU kernel can
// lay out the order of routing it computed itself, one thread per tile, and place
// every tile exactly where ExpertWaveScheduler / InterleavedScheduler put it.
//
// Per local expert e the schedulers see m_blocks[e] row blocks; experts with rows
// form waves of `wave_experts` in id order. Within a wave the L1 (and L2) list is
// the concatenation of its experts' lists, each expert's in grouped raster order.
//   Expert-Wave: for each wave, its L1 list, then its L2 list.
//   Interleaved: the L1 lists of waves 0 .. lag-1, then for each wave w and piece
//   j of `split`: piece j of L2(w), then piece j of L1(w + lag) (empty past the last
//   wave). Piece j of a list of n items is [n*j/split, n*(j+1)/split).
// order_waves() fills the per-expert and per-wave tables once (a serial pass over
// the experts); tile_position() is then independent per tile. CPU-tested against the
// schedulers in moe_tests.cpp; the GPU planner is xstage/moe/device_route.cu.
#pragma once

#include "common/host_device.hpp"

namespace xstage::moe {

struct OrderSpec {
  bool interleaved = false;
  int wave_experts = 1, lag = 1, split = 1;
  int l1_n_blocks = 1, l2_n_blocks = 1;  // column tiles of an L1 / L2 row block
  int raster_group = 1;                  // m blocks per raster group
};

// Tile j of one expert's list (m_blocks x n_blocks tiles in grouped order with groups
// of `group` m blocks, as xstage::for_each_grouped visits them) -> (m, n).
XS_HD void grouped_tile(int j, int m_blocks, int n_blocks, int group, int* m, int* n) {
  const int g = group < 1 ? 1 : group;
  const int m0 = (j / (g * n_blocks)) * g;
  const int gs = m_blocks - m0 < g ? m_blocks - m0 : g;
  const int r = j - m0 * n_blocks;
  *n = r / gs;
  *m = m0 + r % gs;
}

// Start of piece j of a list of n items in `split` pieces.
XS_HD int piece_start(int n, int j, int split) { return static_cast<int>(static_cast<long long>(n) * j / split); }

// The piece that holds item q of a list of n items (0 <= q < n).
XS_HD int piece_of(int q, int n, int split) {
  int j = split - 1;
  while (j > 0 && piece_start(n, j, split) > q) --j;
  return j;
}

// Per-expert tables (experts entries): wave (-1 for an expert without rows), and the
// offsets of the expert's L1 and L2 tiles in its wave's lists. Per-wave tables
// (at most `experts` entries): list sizes and the position where each list starts
// (Interleaved: where its first piece's run starts, see tile_position). Returns the
// number of waves. Needs s.wave_experts, s.lag, s.split >= 1.
XS_HD int order_waves(const OrderSpec& s, int experts, const int* m_blocks, int* wave, int* l1_off, int* l2_off,
                      int* l1_size, int* l2_size, int* l1_start, int* l2_start) {
  int waves = 0, in_wave = 0;
  for (int e = 0; e < experts; ++e) {
    if (m_blocks[e] <= 0) {
      wave[e] = -1, l1_off[e] = l2_off[e] = 0;
      continue;
    }
    if (in_wave == 0) l1_size[waves] = l2_size[waves] = 0, ++waves;
    const int w = waves - 1;
    wave[e] = w;
    l1_off[e] = l1_size[w];
    l2_off[e] = l2_size[w];
    l1_size[w] += m_blocks[e] * s.l1_n_blocks;
    l2_size[w] += m_blocks[e] * s.l2_n_blocks;
    in_wave = in_wave + 1 == s.wave_experts ? 0 : in_wave + 1;
  }
  int pos = 0;
  if (!s.interleaved) {
    for (int w = 0; w < waves; ++w) {
      l1_start[w] = pos;
      l2_start[w] = pos + l1_size[w];
      pos += l1_size[w] + l2_size[w];
    }
    return waves;
  }
  for (int w = 0; w < waves && w < s.lag; ++w) l1_start[w] = pos, pos += l1_size[w];
  for (int w = 0; w < waves; ++w) {  // step w: L2(w) and L1(w + lag), piece by piece
    l2_start[w] = pos;
    if (w + s.lag < waves) l1_start[w + s.lag] = pos;
    pos += l2_size[w] + (w + s.lag < waves ? l1_size[w + s.lag] : 0);
  }
  return waves;
}

// Position in the global order of item q of wave w's L1 (l2 = false) or L2 list,
// from the tables above.
XS_HD int tile_position(const OrderSpec& s, int waves, bool l2, int w, int q, const int* l1_size,
                        const int* l2_size, const int* l1_start, const int* l2_start) {
  if (!s.interleaved) return (l2 ? l2_start[w] : l1_start[w]) + q;
  if (!l2) {
    if (w < s.lag) return l1_start[w] + q;  // prologue
    const int j = piece_of(q, l1_size[w], s.split);
    return l1_start[w] + piece_start(l2_size[w - s.lag], j + 1, s.split) + q;
  }
  const int j = piece_of(q, l2_size[w], s.split);
  const int next = w + s.lag < waves ? l1_size[w + s.lag] : 0;
  return l2_start[w] + q + piece_start(next, j, s.split);
}

}  // namespace xstage::moe
