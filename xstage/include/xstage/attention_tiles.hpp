// Work decomposition of the attention forward pass, shared by host and device:
// the tile space and its orders (what the persistent tile scheduler walks), and
// the masking arithmetic (which K/V blocks a query tile visits, which need
// element masks). Plain integer math, so CPU tests check it exhaustively.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define XS_HD __host__ __device__ __forceinline__
#else
#define XS_HD inline
#endif

namespace xstage::attention {

// Order of the linear tile index.
enum class TileOrder : int {
  // m_block fastest, then head, then batch: CTAs running at the same time work
  // on the same head, so its K/V stay in L2. Work per tile is uniform
  // (non-causal), so round-robin over a persistent grid balances.
  head_major = 0,
  // Causal: tile work grows with m_block. Longest tiles first (all heads' last
  // m_block, then the one before, ...), so round-robin assignment is close to
  // longest-processing-time scheduling and the last wave holds the short tiles.
  longest_first = 1,
};

struct WorkTile {
  int m_block = 0;
  int head = 0;
  int batch = 0;
  int64_t linear = 0;
  bool valid = false;
};

struct TileSpace {
  int m_blocks = 0, heads = 0, batches = 0;
  TileOrder order = TileOrder::head_major;

  XS_HD int64_t count() const { return static_cast<int64_t>(m_blocks) * heads * batches; }

  XS_HD WorkTile tile(int64_t linear) const {
    WorkTile w;
    w.linear = linear;
    w.valid = linear < count();
    if (!w.valid) return w;
    if (order == TileOrder::head_major) {
      w.m_block = static_cast<int>(linear % m_blocks);
      const int64_t bh = linear / m_blocks;
      w.head = static_cast<int>(bh % heads);
      w.batch = static_cast<int>(bh / heads);
    } else {
      const int64_t bh_count = static_cast<int64_t>(heads) * batches;
      const int64_t rank = linear / bh_count;  // 0 = longest
      const int64_t bh = linear % bh_count;
      w.m_block = m_blocks - 1 - static_cast<int>(rank);
      w.head = static_cast<int>(bh % heads);
      w.batch = static_cast<int>(bh / heads);
    }
    return w;
  }
};

// Static persistent scheduler: CTA c takes tiles c, c + grid, c + 2·grid, ...
// Interface shared by every scheduler: initial_work(cta, grid) / next_work(tile, grid).
// A dynamic (atomic-counter) scheduler can replace it without touching the math.
struct StaticPersistentScheduler {
  TileSpace space;
  XS_HD WorkTile initial_work(int cta, int /*grid*/) const { return space.tile(cta); }
  XS_HD WorkTile next_work(const WorkTile& cur, int grid) const { return space.tile(cur.linear + grid); }
};

// Masking arithmetic for one problem.
struct MaskInfo {
  int Sq = 0, Skv = 0;
  bool causal = false;

  // Key j is visible to query i.
  XS_HD bool visible(int i, int j) const { return j >= 0 && j < Skv && (!causal || j <= i + (Skv - Sq)); }

  // Number of K/V blocks (of block_n keys, from block 0) that query rows
  // [m0, m0 + rows) need; rows past Sq are ignored. 0 when no row sees a key.
  XS_HD int n_blocks(int m0, int rows, int block_n) const {
    const int all = (Skv + block_n - 1) / block_n;
    if (!causal) return all;
    int last_row = m0 + rows - 1;
    if (last_row > Sq - 1) last_row = Sq - 1;
    const int64_t last_key = static_cast<int64_t>(last_row) + (Skv - Sq);  // highest visible key of the last row
    if (last_key < 0) return 0;
    const int64_t need = last_key / block_n + 1;
    return need < all ? static_cast<int>(need) : all;
  }

  // Whether K/V block n needs element masks for rows [r0, r0 + rows): false
  // means every key of the block is visible to every one of those rows.
  XS_HD bool needs_mask(int n_block, int block_n, int r0) const {
    const int64_t last_key = static_cast<int64_t>(n_block + 1) * block_n - 1;
    if (last_key >= Skv) return true;                               // tail block
    if (causal && last_key > static_cast<int64_t>(r0) + (Skv - Sq)) return true;  // crosses the diagonal of row r0
    return false;
  }
};

}  // namespace xstage::attention
