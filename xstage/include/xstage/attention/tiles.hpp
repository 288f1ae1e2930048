// Work decomposition of the attention forward pass, shared by host and device:
// the tile space and its orders (what the persistent tile scheduler walks), and
// the masking arithmetic (which K/V blocks a query tile visits, which need
// element masks). Plain integer math, so CPU tests check it exhaustively.
#pragma once

#include <cstdint>

#include "common/host_device.hpp"  // XS_HD

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
  // With group_heads < heads the heads are taken in sections of group_heads
  // (longest first inside each): fewer heads in flight share L2 better.
  longest_first = 1,
  // Ulysses: as head_major, but the m_blocks of each (batch, head)
  // are `slices` equal sequence slices (one per owner rank), interleaved in runs
  // of `slice_run` tiles: slice_first, slice_first + 1, ... (mod slices). With
  // slice_first = rank + 1, consecutive runs go to different owners and the
  // local slice comes last in every group. Needs m_blocks % slices == 0 and
  // (m_blocks / slices) % slice_run == 0 (the Ulysses plan checks it).
  slice_interleaved = 2,
  // Ulysses with a copy-engine drain: the `slices` owner slices one after another,
  // slice_first, slice_first + 1, ... (mod slices); inside a slice its chunks of
  // `chunk_blocks` m_blocks one after another (0: the whole slice is one chunk), each
  // as head_major over its own m_blocks (batch outermost inside a chunk). With
  // slice_first = rank + 1 the remote owners' rows finish chunk by chunk, owner by
  // owner, so each chunk can leave while the later ones compute, and the local slice
  // is computed last. Needs m_blocks % slices == 0 and (m_blocks / slices) %
  // chunk_blocks == 0.
  owner_major = 3,
};

inline const char* tile_order_name(TileOrder o) {
  switch (o) {
    case TileOrder::head_major: return "head_major";
    case TileOrder::longest_first: return "longest_first";
    case TileOrder::slice_interleaved: return "slice_interleaved";
    case TileOrder::owner_major: return "owner_major";
  }
  return "unknown";
}

struct WorkTile {
  int m_block = 0;
  int head = 0;
  int batch = 0;
  int64_t linear = 0;  // position in the tile order (round = linear / grid)
  bool valid = false;
};

struct TileSpace {
  int m_blocks = 0, heads = 0, batches = 0;
  TileOrder order = TileOrder::head_major;
  int group_heads = 0;  // longest_first: heads per section (0 or >= heads: one section)
  int slices = 1;       // slice_interleaved, owner_major: sequence slices per head (owners)
  int slice_first = 0;  // slice_interleaved: the slice of the first run; owner_major: the first slice
  int slice_run = 1;    // slice_interleaved: consecutive tiles of one slice
  int chunk_blocks = 0; // owner_major: m_blocks per chunk of a slice (0: the whole slice)

  XS_HD int64_t count() const { return static_cast<int64_t>(m_blocks) * heads * batches; }

  XS_HD WorkTile tile(int64_t linear) const {
    WorkTile w;
    w.linear = linear;
    w.valid = linear >= 0 && linear < count();
    if (!w.valid) return w;
    if (order == TileOrder::head_major) {
      w.m_block = static_cast<int>(linear % m_blocks);
      const int64_t bh = linear / m_blocks;
      w.head = static_cast<int>(bh % heads);
      w.batch = static_cast<int>(bh / heads);
      return w;
    }
    if (order == TileOrder::slice_interleaved) {
      const int i = static_cast<int>(linear % m_blocks);
      const int64_t bh = linear / m_blocks;
      w.head = static_cast<int>(bh % heads);
      w.batch = static_cast<int>(bh / heads);
      const int group = slices * slice_run, gi = i / group, wi = i % group;
      int slice = slice_first + wi / slice_run;
      if (slice >= slices) slice -= slices;
      w.m_block = slice * (m_blocks / slices) + gi * slice_run + wi % slice_run;
      return w;
    }
    if (order == TileOrder::owner_major) {
      const int per_slice = m_blocks / slices;
      const int chunk = chunk_blocks > 0 && chunk_blocks < per_slice ? chunk_blocks : per_slice;
      const int64_t per_chunk = static_cast<int64_t>(chunk) * heads * batches;
      const int64_t per_owner = per_chunk * (per_slice / chunk);
      int slice = slice_first + static_cast<int>(linear / per_owner);
      if (slice >= slices) slice -= slices;
      const int64_t in_owner = linear % per_owner, in_chunk = in_owner % per_chunk;
      const int64_t bh = in_chunk / chunk;
      w.m_block =
          slice * per_slice + static_cast<int>(in_owner / per_chunk) * chunk + static_cast<int>(in_chunk % chunk);
      w.head = static_cast<int>(bh % heads);
      w.batch = static_cast<int>(bh / heads);
      return w;
    }
    // longest_first, per batch, in sections of g heads.
    const int64_t per_batch = static_cast<int64_t>(m_blocks) * heads;
    w.batch = static_cast<int>(linear / per_batch);
    const int64_t in_batch = linear % per_batch;
    const int g = group_heads > 0 && group_heads < heads ? group_heads : heads;
    const int64_t per_section = static_cast<int64_t>(m_blocks) * g;
    const int section = static_cast<int>(in_batch / per_section);
    const int h0 = section * g;
    const int gs = heads - h0 < g ? heads - h0 : g;  // the last section may be smaller
    const int64_t in_section = in_batch - static_cast<int64_t>(section) * per_section;
    const int64_t rank = in_section / gs;  // 0 = longest
    w.head = h0 + static_cast<int>(in_section % gs);
    w.m_block = m_blocks - 1 - static_cast<int>(rank);
    return w;
  }
};

// Static persistent scheduler: in round r, CTA c takes tile r·grid + c, or
// r·grid + (grid - 1 - c) on odd rounds when `snake` is set (boustrophedon:
// with longest-first orders, a CTA that got a long tile in one round gets a
// short one in the next, which evens out the last wave).
// Interface shared by every scheduler: initial_work(cta, grid) / next_work(tile, grid).
// A dynamic (atomic-counter) scheduler can replace it without touching the math.
struct StaticPersistentScheduler {
  TileSpace space;
  bool snake = false;

  // WorkTile stays five words (m_block, head, batch, linear, valid): the
  // consumers keep it live across the mainloop, and two more words there
  // cost a D = 128 consumer a register spill. Round and CTA follow from
  // `linear` and the grid.
  XS_HD WorkTile at(int round, int cta, int grid) const {
    const int slot = (snake && (round & 1)) ? grid - 1 - cta : cta;
    return space.tile(static_cast<int64_t>(round) * grid + slot);
  }
  XS_HD static int round_of(const WorkTile& w, int grid) { return static_cast<int>(w.linear / grid); }
  XS_HD int cta_of(const WorkTile& w, int grid) const {
    const int slot = static_cast<int>(w.linear % grid);
    return (snake && (round_of(w, grid) & 1)) ? grid - 1 - slot : slot;
  }
  XS_HD WorkTile initial_work(int cta, int grid) const { return at(0, cta, grid); }
  // Whether `cur` is its CTA's last tile (next_work(cur, grid) is not valid), without
  // decoding the next tile: index arithmetic only, cheap inside a kernel's tile loop.
  XS_HD bool is_last(const WorkTile& cur, int grid) const {
    if (!snake) return cur.linear + grid >= space.count();
    const int next_round = round_of(cur, grid) + 1, cta = cta_of(cur, grid);
    const int slot = (next_round & 1) ? grid - 1 - cta : cta;
    return static_cast<int64_t>(next_round) * grid + slot >= space.count();
  }
  XS_HD WorkTile next_work(const WorkTile& cur, int grid) const {
    if (!snake) return space.tile(cur.linear + grid);  // plain round-robin
    return at(round_of(cur, grid) + 1, cta_of(cur, grid), grid);
  }
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
