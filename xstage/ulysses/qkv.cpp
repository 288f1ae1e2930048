// Host part of the fused QKV projection + pre-attention All-to-All
// (xstage/ulysses/qkv.hpp): validation, the tile order and its Burst-Gap
// profile, the per-source signal count, and the CPU reference.
//
// Burst profile of an order (same model as the attention epilogue's, schedule.cpp):
// CTA c computes tiles order[c], order[c + grid], ...; a tile whose heads belong
// to other ranks ends with a burst of its remote bytes (128 rows × 256 B per
// remote head). The advisor gets the busiest CTA's pattern: bursts = its remote
// tiles, bytes = the mean remote bytes of a remote tile, sms = most CTAs storing
// remotely in one round, gap = one tile's compute (2·128·256·C flops).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "common/check.hpp"
#include "common/config_print.hpp"
#include "common/files.hpp"
#include "xstage/attention/attention.hpp"
#include "xstage/hopper/tile_raster.hpp"
#include "xstage/ulysses/qkv.hpp"

namespace xstage::ulysses {

void validate_qkv(const Problem& p) {
  validate(p);
  XS_ASSERT(p.head_dim == kQkvHeadDim, "ulysses: the fused QKV projection needs D = {} (got D = {})", kQkvHeadDim,
            p.head_dim);
  XS_ASSERT(qkv_rows(p) % kQkvTileRows == 0,
            "ulysses: the fused QKV projection needs B*S/P = {} rows to be a multiple of {}", qkv_rows(p),
            kQkvTileRows);
  XS_ASSERT(qkv_hidden(p) % kQkvTileK == 0 && 3 * qkv_hidden(p) < (int64_t{1} << 31),
            "ulysses: the fused QKV projection needs C = H*D = {} to be a multiple of {} and 3C below 2^31",
            qkv_hidden(p), kQkvTileK);
  XS_ASSERT(int64_t{qkv_m_blocks(p)} * qkv_col_tiles(p) < (int64_t{1} << kQkvSelShift),
            "ulysses: the fused QKV projection has {} x {} tiles, more than its order entries can name",
            qkv_m_blocks(p), qkv_col_tiles(p));
}

uint32_t qkv_signals_per_source(const Problem& p) {
  return static_cast<uint32_t>(2 * qkv_m_blocks(p) * 3 * p.heads_per_rank());
}

const char* to_string(QkvOrder o) { return o == QkvOrder::natural ? "natural" : "owner_interleaved"; }

namespace {

int tile_owner(const Problem& p, int col_tile, int half) {
  const int gh = 2 * col_tile + half;
  return gh < 3 * p.heads ? qkv_owner(gh, int(p.heads), int(p.heads_per_rank())) : -1;
}

// Remote heads (0, 1 or 2) of column tile ct for `rank`.
int remote_heads(const Problem& p, int rank, int ct) {
  int n = 0;
  for (int half = 0; half < 2; ++half) {
    const int o = tile_owner(p, ct, half);
    n += (o >= 0 && o != rank) ? 1 : 0;
  }
  return n;
}

// Remote heads of launch entry e (a whole tile or one of its heads).
int entry_remote_heads(const Problem& p, int rank, int e) {
  const int ct = qkv_entry_tile(e) % qkv_col_tiles(p), sel = qkv_entry_sel(e);
  if (sel == 0) return remote_heads(p, rank, ct);
  const int o = tile_owner(p, ct, sel - 1);
  return (o >= 0 && o != rank) ? 1 : 0;
}

void print_once(const Problem& p, int rank, const QkvSchedule& s) {
  common::print_config_once(fmt::format("qkv {} r{}", describe(p), rank), [&] {
    return fmt::format("xstage: qkv schedule [{}] rank {}: {}", describe(p), rank, s.reason);
  });
}

}  // namespace

std::vector<int> qkv_tile_order(const Problem& p, int rank, QkvOrder order, int group) {
  validate_qkv(p);
  XS_ASSERT(group >= 1, "ulysses: the QKV raster group must be >= 1 (got {})", group);
  XS_ASSERT(rank >= 0 && rank < p.ranks, "ulysses: rank {} is outside 0 .. {}", rank, p.ranks - 1);
  const int mb = qkv_m_blocks(p), ct = qkv_col_tiles(p);
  std::vector<int> cols(static_cast<std::size_t>(ct));
  for (int c = 0; c < ct; ++c) cols[c] = c;
  if (order == QkvOrder::owner_interleaved) {
    // Key: (index among the tiles of the same owner, owner distance from rank + 1).
    std::vector<int> seen(static_cast<std::size_t>(p.ranks), 0);
    std::vector<std::pair<int, int>> key(static_cast<std::size_t>(ct));
    for (int c = 0; c < ct; ++c) {
      const int o = tile_owner(p, c, 0);
      key[c] = {seen[o]++, ((o - rank - 1) % p.ranks + p.ranks) % p.ranks};
    }
    std::stable_sort(cols.begin(), cols.end(), [&](int a, int b) { return key[a] < key[b]; });
    // Own tiles last within the m block (they cost no NVLink and can close it).
    std::stable_partition(cols.begin(), cols.end(), [&](int c) { return remote_heads(p, rank, c) > 0; });
  }
  std::vector<int> out;
  out.reserve(static_cast<std::size_t>(mb) * ct);
  for_each_grouped(mb, cols, group, [&](int m, int c) { out.push_back(m * ct + c); });
  return out;
}

std::vector<int> qkv_split_tail(const Problem& p, std::vector<int> order, int grid) {
  validate_qkv(p);
  XS_ASSERT(grid >= 1, "ulysses: grid must be >= 1 (got {})", grid);
  const int T = static_cast<int>(order.size()), full = T / grid * grid, R = T - full;
  if (R == 0 || 2 * R > grid) return order;
  std::vector<int> out(order.begin(), order.begin() + full);
  for (int i = full; i < T; ++i) {
    XS_ASSERT(qkv_entry_sel(order[i]) == 0, "ulysses: qkv_split_tail needs whole-tile entries (entry {} is not)", i);
    const int t = order[i], ct = t % qkv_col_tiles(p);
    out.push_back(qkv_entry(t, 1));
    if (2 * ct + 1 < 3 * p.heads) out.push_back(qkv_entry(t, 2));
  }
  return out;
}

int qkv_raster_group(const Problem& p, int grid) {
  const double a = double(kQkvTileRows) * double(qkv_hidden(p)) * 2, b = 2.0 * kQkvHeadDim * double(qkv_hidden(p)) * 2;
  return raster_group(grid, qkv_m_blocks(p), a, b);
}

QkvSchedule choose_qkv_schedule(const Problem& p, int rank, int grid, const burstgap::ModelParams& params,
                                const QkvTimeModel& time, int group, bool split_tail) {
  validate_qkv(p);
  XS_ASSERT(grid >= 1, "ulysses: grid must be >= 1 (got {})", grid);
  XS_ASSERT(group >= 0, "ulysses: the QKV raster group must be >= 0 (0: the L2 rule; got {})", group);
  if (group == 0) group = qkv_raster_group(p, grid);
  XS_ASSERT(time.tflops_per_sm > 0, "ulysses: the QKV time model needs a positive rate");
  const double tile_flops = 2.0 * kQkvTileRows * 2 * kQkvHeadDim * static_cast<double>(qkv_hidden(p));
  const double t_tile = tile_flops / (time.tflops_per_sm * 1e3);
  const double head_bytes = double(kQkvTileRows) * kQkvHeadDim * 2;
  QkvSchedule best;
  bool have = false;
  for (QkvOrder kind : {QkvOrder::owner_interleaved, QkvOrder::natural}) {
    QkvSchedule s;
    s.order_kind = kind;
    s.order = qkv_tile_order(p, rank, kind, group);
    if (split_tail) {
      const std::size_t whole = s.order.size();
      s.order = qkv_split_tail(p, std::move(s.order), grid);
      s.split_tail = s.order.size() != whole;
    }
    s.group = group;
    s.grid = grid;
    s.tile_ns = t_tile;
    const int n = static_cast<int>(s.order.size());
    const int rounds = (n + grid - 1) / grid;
    std::vector<int> per_round(static_cast<std::size_t>(rounds), 0), per_cta(static_cast<std::size_t>(grid), 0);
    double remote_bytes = 0;
    for (int i = 0; i < n; ++i) {
      const int heads = entry_remote_heads(p, rank, s.order[i]);
      if (heads == 0) continue;
      ++s.remote_tiles;
      ++per_round[i / grid];
      ++per_cta[i % grid];
      remote_bytes += heads * head_bytes;
    }
    for (int v : per_round) s.max_remote_ctas = std::max(s.max_remote_ctas, v);
    const int bursts = *std::max_element(per_cta.begin(), per_cta.end());
    if (bursts > 0) {
      burstgap::BurstProfile prof;
      prof.bytes_per_burst = static_cast<std::size_t>(remote_bytes / s.remote_tiles);
      prof.sms = std::max(1, s.max_remote_ctas);
      prof.compute_ns_between_bursts = t_tile;
      prof.bursts = bursts;
      prof.pattern = params.pattern;
      prof.store = params.store;
      s.advice = burstgap::advise(params, prof);
      s.predicted_stall_ns = s.advice.predicted_stall_ns;
    }
    const double tie = 0.01 * t_tile;
    if (!have || s.predicted_stall_ns < best.predicted_stall_ns - tie) {
      best = std::move(s);
      have = true;
    }
  }
  best.reason = fmt::format(
      "{} order in groups of {} m blocks: {} tiles of 128 x 256 as {} entries{} on {} CTAs, {} with remote heads, "
      "<= {} CTAs storing remotely per round, tile compute {} (model); predicted stall {}{}{}",
      to_string(best.order_kind), best.group, qkv_tiles(p), best.order.size(),
      best.split_tail ? " (last round split into one-head entries)" : "", grid, best.remote_tiles, best.max_remote_ctas,
      common::format_ns(best.tile_ns), common::format_ns(best.predicted_stall_ns),
      best.advice.reason.empty() ? "" : ": ", best.advice.reason);
  print_once(p, rank, best);
  return best;
}

QkvOwnerOut qkv_reference(const Problem& p, const QkvHost& in, int owner) {
  validate_qkv(p);
  const int64_t C = qkv_hidden(p), L = qkv_rows(p), R = p.rows_per_rank(), D = kQkvHeadDim;
  const int Hp = static_cast<int>(p.heads_per_rank());
  XS_ASSERT(owner >= 0 && owner < p.ranks, "ulysses: owner {} is outside 0 .. {}", owner, p.ranks - 1);
  XS_ASSERT(in.h.size() == size_t(p.ranks) && in.cos.size() == size_t(p.ranks) && in.sin.size() == size_t(p.ranks),
            "ulysses: qkv_reference needs h, cos and sin of each of the {} ranks", p.ranks);
  XS_ASSERT(in.w.size() == size_t(3 * C * C) && in.bias.size() == size_t(3 * C) && in.q_norm.size() == size_t(D) &&
                in.k_norm.size() == size_t(D),
            "ulysses: qkv_reference: weight, bias or norm sizes do not match C = {}", C);
  const std::size_t out_elems = static_cast<std::size_t>(p.batch * p.seq * Hp * D);
  QkvOwnerOut out{std::vector<float>(out_elems), std::vector<float>(out_elems), std::vector<float>(out_elems)};
  auto bf = [](double x) { return attention::bf16_bits_to_float(attention::float_to_bf16_bits(float(x))); };
  std::vector<double> y(static_cast<std::size_t>(D));
  for (int src = 0; src < p.ranks; ++src) {
    XS_ASSERT(in.h[src].size() == size_t(L * C) && in.cos[src].size() == size_t(L * D / 2) &&
                  in.sin[src].size() == size_t(L * D / 2),
              "ulysses: qkv_reference: rank {}'s h, cos or sin has the wrong size", src);
    for (int64_t m = 0; m < L; ++m) {
      const float* hr = in.h[src].data() + m * C;
      for (int part = 0; part < 3; ++part) {
        for (int hl = 0; hl < Hp; ++hl) {
          const int head = owner * Hp + hl;
          const int64_t col0 = part * C + int64_t{head} * D;
          for (int64_t d = 0; d < D; ++d) {
            const float* wr = in.w.data() + (col0 + d) * C;
            double acc = 0;
            for (int64_t kk = 0; kk < C; ++kk) acc += double(hr[kk]) * wr[kk];
            y[d] = acc + in.bias[col0 + d];
          }
          if (part < 2) {
            double ss = 0;
            for (double v : y) ss += v * v;
            const double inv = 1.0 / std::sqrt(ss / double(D) + in.eps);
            const auto& w = part == 0 ? in.q_norm : in.k_norm;
            for (int64_t i = 0; i < D / 2; ++i) {
              const double x0 = y[2 * i] * inv * w[2 * i], x1 = y[2 * i + 1] * inv * w[2 * i + 1];
              const double c = in.cos[src][m * (D / 2) + i], s = in.sin[src][m * (D / 2) + i];
              y[2 * i] = x0 * c - x1 * s;
              y[2 * i + 1] = x0 * s + x1 * c;
            }
          }
          auto& dst = part == 0 ? out.q : part == 1 ? out.k : out.v;
          const int64_t off = qkv_dest_offset(m, head, src, R, p.seq, Hp);
          for (int64_t d = 0; d < D; ++d) dst[static_cast<std::size_t>(off + d)] = bf(y[d]);
        }
      }
    }
  }
  return out;
}

QkvHost qkv_random_inputs(const Problem& p, uint32_t seed, bool identity) {
  validate_qkv(p);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_real_distribution<float> angle(-3.1f, 3.1f);
  auto bf = [](float x) { return attention::bf16_bits_to_float(attention::float_to_bf16_bits(x)); };
  const int64_t C = qkv_hidden(p), L = qkv_rows(p), D = kQkvHeadDim;
  QkvHost in;
  in.w.resize(static_cast<std::size_t>(3 * C * C));
  for (auto& x : in.w) x = bf(nd(rng) / std::sqrt(float(C)));
  in.bias.resize(static_cast<std::size_t>(3 * C));
  for (auto& x : in.bias) x = 0.2f * nd(rng);
  for (auto* n : {&in.q_norm, &in.k_norm}) {
    n->resize(static_cast<std::size_t>(D));
    for (auto& x : *n) x = identity ? 1.f : 1.f + 0.2f * nd(rng);
  }
  for (int r = 0; r < p.ranks; ++r) {
    in.h.emplace_back(static_cast<std::size_t>(L * C));
    for (auto& x : in.h.back()) x = bf(nd(rng));
    in.cos.emplace_back(static_cast<std::size_t>(L * D / 2));
    in.sin.emplace_back(static_cast<std::size_t>(L * D / 2));
    for (std::size_t i = 0; i < in.cos.back().size(); ++i) {
      const float a = identity ? 0.f : angle(rng);
      in.cos.back()[i] = std::cos(a);
      in.sin.back()[i] = std::sin(a);
    }
  }
  return in;
}

}  // namespace xstage::ulysses
