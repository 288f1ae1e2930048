// The QKV projection with the pre-attention All-to-All fused into its epilogue.
// Host part: shapes, who owns which output tile, where a row lands, the tile order, what each source signals. CPU-tested; the
// kernel (xstage/ulysses/sm90_qkv_fused.cu) uses the same arithmetic.
//
// Rank r holds its tokens' activations h [B·S/P, C] (bf16, C = H·D) and the
// replicated weight W [3C, C] (q | k | v, each head-major). The projection
// y = h·Wᵀ + bias is computed in tiles of 128 rows × 256 columns, i.e. two heads
// of the flat list of 3H heads (global head gh = part·H + head, part 0 = q,
// 1 = k, 2 = v). The epilogue finishes each head in registers (q, k: RMSNorm over
// D, times the norm weight, then the rotary turn of pair (2i, 2i+1) by the row's
// cos/sin; v: bias only), rounds to bf16 and stores the 128 × 128 block with
// 16-byte stores straight into the owner of that head, owner = head / (H/P), at
// the layout of the Ulysses pre-attention All-to-All: [B, S, H/P, D], row
// b·S + r·S/P + s, local head head − owner·H/P.
//
// Signals: each consumer warpgroup (64 rows) adds 1 to the owner's counter for
// rank r after its stores of one head (fence.acq_rel.sys before), so per launch
// every owner receives qkv_signals_per_source() from every source. Before its
// first store a CTA waits until every owner has started the same launch (a ready
// flag each rank raises at its kernel's start), so nobody overwrites inputs an
// owner's previous attention may still read.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "xstage/burstgap/burstgap.hpp"
#include "xstage/ulysses/ulysses.hpp"
#include "xstage/ulysses/geometry.hpp"  // XS_HD, kMaxRanks

namespace xstage::ulysses {

constexpr int kQkvTileRows = 128;  // tokens per tile (two consumer warpgroups of 64)
constexpr int kQkvHeadDim = 128;   // one head = one 128-column half of a tile
constexpr int kQkvTileK = 64;      // K per pipeline stage

// What one projection reads, all device pointers (Layer::pre_attention_qkv).
struct QkvInputs {
  const void* h = nullptr;        // [B·S/P, C] bf16, C = H·D
  const void* w = nullptr;        // [3C, C] bf16 (q | k | v rows, head-major)
  const float* bias = nullptr;    // [3C]
  const float* q_norm = nullptr;  // [D]
  const float* k_norm = nullptr;  // [D]
  const float* cos = nullptr;     // [B·S/P, D/2], this rank's rows
  const float* sin = nullptr;
  float eps = 1e-6f;
};

// Throws common::Error (one line) unless the Ulysses problem suits the fused
// projection: validate(p), D == 128, (B·S/P) % 128 == 0 (validate already has
// (S/P) % 128), and the TMA limits of the weight view.
void validate_qkv(const Problem& p);

inline int64_t qkv_hidden(const Problem& p) { return p.heads * p.head_dim; }              // C
inline int64_t qkv_rows(const Problem& p) { return p.batch * p.rows_per_rank(); }         // local rows
inline int qkv_m_blocks(const Problem& p) { return static_cast<int>(qkv_rows(p) / kQkvTileRows); }
inline int qkv_col_tiles(const Problem& p) { return static_cast<int>((3 * p.heads + 1) / 2); }  // 2 heads each
inline int qkv_tiles(const Problem& p) { return qkv_m_blocks(p) * qkv_col_tiles(p); }

// Owner of global head gh in [0, 3H): the rank computing attention for it.
XS_HD int qkv_owner(int gh, int heads, int heads_per_rank) { return (gh % heads) / heads_per_rank; }

// Element offset, in the owner's q, k or v buffer [B, S, H/P, D], of local row m
// (b = m / (S/P), s = m % (S/P)) of rank `rank`, head `head` in [0, H).
XS_HD int64_t qkv_dest_offset(int64_t m, int head, int rank, int64_t rows_per_rank, int64_t seq,
                                     int heads_per_rank) {
  const int64_t b = m / rows_per_rank, s = m % rows_per_rank;
  const int owner = head / heads_per_rank;
  return ((b * seq + rank * rows_per_rank + s) * heads_per_rank + (head - owner * heads_per_rank)) * kQkvHeadDim;
}

// The checks' tolerance for a bf16 output against a reference: one bf16 step
// (2^-7 relative at the top of a binade) plus a small absolute floor. NaN fails.
inline bool within_one_bf16_step(double got, double want) {
  return std::abs(got - want) <= std::abs(want) / 128 + 2e-3;
}

// What one launch of one source adds to each owner's counter for that source:
// 2 warpgroups × m blocks × the 3·H/P heads the owner holds.
uint32_t qkv_signals_per_source(const Problem& p);

// An entry of a launch order: a tile index t = m_block · col_tiles + col_tile, and
// which of its heads it computes (bits from kQkvSelShift): 0 both, 1 the first
// (head 2·col_tile) only, 2 the second only. A one-head entry loads and multiplies
// half of W's boxes, so it takes about half a tile's time.
constexpr int kQkvSelShift = 29;
XS_HD int qkv_entry(int tile, int sel) { return tile | (sel << kQkvSelShift); }
XS_HD int qkv_entry_tile(int e) { return e & ((1 << kQkvSelShift) - 1); }
XS_HD int qkv_entry_sel(int e) { return e >> kQkvSelShift; }

enum class QkvOrder { natural, owner_interleaved };
const char* to_string(QkvOrder o);

// Tile t = m_block · col_tiles + col_tile, in launch order (CTA b takes
// order[b], order[b + grid], ...). natural: t ascending. owner_interleaved: per
// m block, the column tiles by (rank of the tile among its owner's tiles, owner
// counted from rank + 1), so that consecutive tiles go to different owners and
// this rank's own heads come last. Both in grouped raster order
// (xstage/hopper/tile_raster.hpp): groups of `group` m blocks, column tile by column
// tile in the order above, m fastest; group 1 is m-major, so the owner order
// holds per m block.
std::vector<int> qkv_tile_order(const Problem& p, int rank, QkvOrder order, int group = 1);

// The last partial round, split: with T whole-tile entries on `grid` CTAs (CTA b
// takes entries b, b + grid, ...), F = T / grid full rounds and R = T % grid tiles
// left, the launch takes F + 1 tile times. If 0 < 2R <= grid, the R tail tiles
// become one-head entries (two per tile, one for a tile whose second head is past
// 3H), each on its own CTA, and the launch takes F + 1/2. Otherwise the order is
// returned as it is. Expects whole-tile entries.
std::vector<int> qkv_split_tail(const Problem& p, std::vector<int> order, int grid);

// raster_group for this problem's tiles (A block 128 × C, B tile 256 × C) on
// `grid` CTAs: 16 on 132 SMs, fewer when there are fewer m blocks.
int qkv_raster_group(const Problem& p, int grid);

struct QkvTimeModel {
  double tflops_per_sm = 4.6;  // bf16 wgmma, dense, per SM (H200: ~600 TFLOP/s over 132 SMs)
};

struct QkvSchedule {
  QkvOrder order_kind = QkvOrder::owner_interleaved;
  std::vector<int> order;        // launch entries (qkv_entry), tail split when split_tail
  bool split_tail = false;       // qkv_split_tail changed the order
  int group = 1;                 // m blocks per raster group
  int grid = 0;
  int remote_tiles = 0;          // entries with at least one head owned by another rank
  int max_remote_ctas = 0;       // most CTAs storing remotely in one round
  double tile_ns = 0;            // modelled compute time of one tile
  double predicted_stall_ns = 0; // Burst-Gap advisor, busiest CTA
  burstgap::Advice advice;
  std::string reason;
};

// Chooses the order with the smaller predicted stall (ties: owner_interleaved),
// each candidate profiled as bursts of one tile's remote bytes from the CTAs
// storing remotely per round, one tile's compute apart. Prints it once per
// problem with XSTAGE_PRINT_CONFIG=1. group: m blocks per raster group, 0 for
// qkv_raster_group(p, grid). split_tail: apply qkv_split_tail to the chosen order.
QkvSchedule choose_qkv_schedule(const Problem& p, int rank, int grid, const burstgap::ModelParams& params,
                                const QkvTimeModel& time = {}, int group = 0, bool split_tail = true);

// CPU reference of what owner `owner` holds after the fused projection: its q, k
// and v [B, S, H/P, D] (fp32, rounded to bf16 like the kernel's stores), from
// every rank's inputs. h[src] is rank src's [B·S/P, C] (bf16 values as float),
// w [3C, C], bias [3C], norms [D], cos/sin[src] rank src's [B·S/P, D/2].
struct QkvHost {
  std::vector<std::vector<float>> h, cos, sin;  // per source rank
  std::vector<float> w, bias, q_norm, k_norm;
  float eps = 1e-6f;
};
struct QkvOwnerOut {
  std::vector<float> q, k, v;
};
QkvOwnerOut qkv_reference(const Problem& p, const QkvHost& in, int owner);

// Random inputs for every rank (bf16-exact h and W, W scaled by 1/sqrt(C), bias
// ~0.2 N(0,1), norm weights 1 + 0.2 N(0,1), rotary angles uniform in (-3.1, 3.1));
// identity: norm weights 1 and no turn (cos 1, sin 0).
QkvHost qkv_random_inputs(const Problem& p, uint32_t seed, bool identity = false);

}  // namespace xstage::ulysses
