// Host side of the fused QKV launcher (qkv_fused.hpp): the TMA views, argument
// checks before launch, and the one-line explanation of a timed-out wait.
#include <fmt/format.h>

#include "common/check.hpp"
#include "xstage/ulysses/qkv_fused.hpp"
#include "xstage/hopper/tensor_map.hpp"
#include "xstage/ulysses/qkv.hpp"

namespace xstage::ulysses {

void launch_qkv_kernel(const QkvArgs& a, int grid, cudaStream_t stream);  // sm90_qkv_fused.cu

namespace {
CUtensorMap map_2d(const void* base, int64_t rows, int64_t cols) {
  hopper::TiledMapSpec s;
  s.base = base;
  s.rank = 2;
  s.dims[0] = static_cast<uint64_t>(cols);
  s.dims[1] = static_cast<uint64_t>(rows);
  s.strides_bytes[1] = static_cast<uint64_t>(cols) * 2;
  s.box[0] = kQkvTileK;
  s.box[1] = kQkvTileRows;
  s.swizzle_128b = true;
  return hopper::make_tiled_map_bf16(s);
}

}  // namespace

QkvArgs qkv_shape_args(const Problem& p, int rank) {
  validate_qkv(p);
  QkvArgs a;
  a.rows = static_cast<int>(qkv_rows(p));
  a.rows_per_rank = static_cast<int>(p.rows_per_rank());
  a.seq = static_cast<int>(p.seq);
  a.hidden = static_cast<int>(qkv_hidden(p));
  a.heads = static_cast<int>(p.heads);
  a.heads_per_rank = static_cast<int>(p.heads_per_rank());
  a.rank = rank;
  a.ranks = p.ranks;
  a.col_tiles = qkv_col_tiles(p);
  a.n_tiles = qkv_tiles(p);
  a.n_entries = a.n_tiles;
  return a;
}

void qkv_bind_inputs(QkvArgs& a, const QkvInputs& in) {
  XS_ASSERT(in.h && in.w && in.bias && in.q_norm && in.k_norm && in.cos && in.sin,
            "fused QKV: the projection needs h, W, bias, both norm weights, cos and sin");
  a.map_h = qkv_map_h(in.h, a.rows, a.hidden);
  a.map_w = qkv_map_w(in.w, a.hidden);
  a.bias = in.bias;
  a.q_norm = in.q_norm;
  a.k_norm = in.k_norm;
  a.cos = in.cos;
  a.sin = in.sin;
  a.eps = in.eps;
}

CUtensorMap qkv_map_h(const void* h, int64_t rows, int64_t hidden) { return map_2d(h, rows, hidden); }
CUtensorMap qkv_map_w(const void* w, int64_t hidden) { return map_2d(w, 3 * hidden, hidden); }

void launch_qkv_fused(const QkvArgs& a, int grid, cudaStream_t stream) {
  XS_ASSERT(a.ranks >= 1 && a.ranks <= kMaxRanks && a.rank >= 0 && a.rank < a.ranks,
            "fused QKV: rank {} of {} is outside 1..{} ranks", a.rank, a.ranks, kMaxRanks);
  XS_ASSERT(a.hidden % kQkvTileK == 0 && a.hidden == a.heads * kQkvHeadDim && a.rows % kQkvTileRows == 0 &&
                a.heads % a.ranks == 0 && a.heads_per_rank == a.heads / a.ranks,
            "fused QKV: shapes do not fit (rows {}, C {}, H {}, H/P {})", a.rows, a.hidden, a.heads,
            a.heads_per_rank);
  XS_ASSERT(a.n_tiles == (a.rows / kQkvTileRows) * a.col_tiles && a.col_tiles == (3 * a.heads + 1) / 2,
            "fused QKV: {} tiles do not match {} rows and {} column tiles", a.n_tiles, a.rows, a.col_tiles);
  XS_ASSERT(a.n_entries >= a.n_tiles && a.n_entries <= 2 * a.n_tiles,
            "fused QKV: an order of {} entries cannot cover {} tiles", a.n_entries, a.n_tiles);
  XS_ASSERT(grid >= 1 && grid <= a.n_entries, "fused QKV: grid {} must be in 1..{} entries", grid, a.n_entries);
  XS_ASSERT(a.order && a.bias && a.q_norm && a.k_norm && a.cos && a.sin && a.ready_in,
            "fused QKV: a device pointer is missing");
  for (int j = 0; j < a.ranks; ++j)
    XS_ASSERT(a.dst[0][j] && a.dst[1][j] && a.dst[2][j] && a.done[j] && a.ready_out[j],
              "fused QKV: owner {}'s pointers are missing", j);
  sync::register_sites(kQkvSites);
  QkvArgs k = a;
  k.wait = sync::wait_context(sync::Kernel::qkv, a.rank);
  launch_qkv_kernel(k, grid, stream);
}

std::string qkv_explain_failure() { return sync::take_report(); }

}  // namespace xstage::ulysses
