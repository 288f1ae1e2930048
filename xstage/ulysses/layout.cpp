// Ulysses layout: validation, who holds what, the two All-to-All plans and a
// host executor for them (the CPU reference runs the plans the GPU runs).
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "common/check.hpp"
#include "xstage/ulysses/ulysses.hpp"

namespace xstage::ulysses {

void validate(const Problem& p, int visible_gpus) {
  XS_ASSERT(p.ranks >= 1 && p.ranks <= kMaxRanks, "ulysses: P = {} ranks is not supported (1 .. {})", p.ranks,
            kMaxRanks);
  XS_ASSERT(visible_gpus <= 0 || p.ranks <= visible_gpus,
            "ulysses: P = {} ranks needs {} GPUs, but only {} are visible", p.ranks, p.ranks, visible_gpus);
  XS_ASSERT(p.batch >= 1 && p.seq >= 1 && p.heads >= 1, "ulysses: empty shape B = {}, S = {}, H = {}", p.batch, p.seq,
            p.heads);
  XS_ASSERT(p.head_dim == 64 || p.head_dim == 128, "ulysses: head dim D = {} is not supported (supported: 64, 128)",
            p.head_dim);
  XS_ASSERT(p.heads % p.ranks == 0, "ulysses: H = {} heads do not split over P = {} ranks (H % P = {})", p.heads,
            p.ranks, p.heads % p.ranks);
  XS_ASSERT(p.seq % p.ranks == 0, "ulysses: S = {} rows do not split over P = {} ranks (S % P = {})", p.seq, p.ranks,
            p.seq % p.ranks);
  XS_ASSERT(p.rows_per_rank() % kTileRows == 0,
            "ulysses: S/P = {} rows per rank must be a multiple of the {}-row attention tile, so that no tile "
            "straddles two owners' slices",
            p.rows_per_rank(), kTileRows);
  XS_ASSERT(p.batch * p.seq * p.heads * p.head_dim < (int64_t{1} << 31) * 8,
            "ulysses: B*S*H*D = {} elements is too large", p.batch * p.seq * p.heads * p.head_dim);
  XS_ASSERT(p.seq < (int64_t{1} << 30), "ulysses: S = {} is too large", p.seq);
  XS_ASSERT(p.valid >= 0 && p.valid <= p.seq, "ulysses: {} valid rows is outside 0 .. S = {}", p.valid, p.seq);
  XS_ASSERT(!p.causal || p.keys() == p.seq,
            "ulysses: causal attention over a padded sequence ({} of {} rows valid) is not supported", p.valid, p.seq);
}

std::string describe(const Problem& p) {
  return fmt::format("P={} B={} S={}{} H={} D={}{}", p.ranks, p.batch, p.seq,
                     p.keys() < p.seq ? fmt::format(" ({} valid)", p.keys()) : "", p.heads, p.head_dim,
                     p.causal ? " causal" : "");
}

RankLayout rank_layout(const Problem& p, int rank) {
  XS_ASSERT(rank >= 0 && rank < p.ranks, "ulysses: rank {} is outside 0 .. {}", rank, p.ranks - 1);
  return {rank, rank * p.rows_per_rank(), p.rows_per_rank(), rank * p.heads_per_rank(), p.heads_per_rank()};
}

int owner_of_row(const Problem& p, int64_t row) {
  XS_ASSERT(row >= 0 && row < p.seq, "ulysses: row {} is outside 0 .. {}", row, p.seq - 1);
  return static_cast<int>(row / p.rows_per_rank());
}

const char* to_string(Buf b) {
  switch (b) {
    case Buf::input: return "input";
    case Buf::send: return "send";
    case Buf::recv: return "recv";
    case Buf::attn: return "attn";
    case Buf::output: return "output";
  }
  return "?";
}

ExchangePlan pre_attention_plan(const Problem& p, int rank) {
  validate(p);
  const int P = p.ranks;
  const int64_t B = p.batch, S = p.seq, R = p.rows_per_rank(), H = p.heads, Hp = p.heads_per_rank(), D = p.head_dim;
  const int64_t chunk = B * R * Hp * D;  // one peer's share: [B, S/P, H/P, D]
  ExchangePlan plan;
  for (int64_t b = 0; b < B; ++b)  // own heads of own rows: straight into place
    plan.before.push_back({Buf::input, Buf::attn, b * R * H * D + rank * Hp * D, b * S * Hp * D + rank * R * Hp * D,
                           Hp * D, R, H * D, Hp * D});
  for (int j = 0; j < P; ++j) {
    if (j == rank) continue;
    // Rows of all batches are H*D apart in the input: one 2-D copy per peer.
    plan.before.push_back({Buf::input, Buf::send, j * Hp * D, j * chunk, Hp * D, B * R, H * D, Hp * D});
    if (B == 1) {
      plan.transfers.push_back({j, Buf::send, Buf::attn, j * chunk, j * R * Hp * D, chunk});
    } else {
      plan.transfers.push_back({j, Buf::send, Buf::recv, j * chunk, j * chunk, chunk});
      plan.after.push_back({Buf::recv, Buf::attn, j * chunk, j * R * Hp * D, R * Hp * D, B, R * Hp * D, S * Hp * D});
    }
  }
  if (P > 1) plan.send_elems = P * chunk;
  if (P > 1 && B > 1) plan.recv_elems = P * chunk;
  return plan;
}

ExchangePlan post_attention_plan(const Problem& p, int rank) {
  validate(p);
  const int P = p.ranks;
  const int64_t B = p.batch, S = p.seq, R = p.rows_per_rank(), H = p.heads, Hp = p.heads_per_rank(), D = p.head_dim;
  const int64_t chunk = B * R * Hp * D;
  ExchangePlan plan;
  for (int64_t b = 0; b < B; ++b)
    plan.before.push_back({Buf::attn, Buf::output, b * S * Hp * D + rank * R * Hp * D, b * R * H * D + rank * Hp * D,
                           Hp * D, R, Hp * D, H * D});
  for (int j = 0; j < P; ++j) {
    if (j == rank) continue;
    if (B == 1) {  // slice j of attn is contiguous: send it as it is
      plan.transfers.push_back({j, Buf::attn, Buf::recv, j * R * Hp * D, j * chunk, chunk});
    } else {
      plan.before.push_back({Buf::attn, Buf::send, j * R * Hp * D, j * chunk, R * Hp * D, B, S * Hp * D, R * Hp * D});
      plan.transfers.push_back({j, Buf::send, Buf::recv, j * chunk, j * chunk, chunk});
    }
    // Source j's heads go to head offset j*H/P; rows of all batches are uniform on both sides.
    plan.after.push_back({Buf::recv, Buf::output, j * chunk, j * Hp * D, Hp * D, B * R, Hp * D, H * D});
  }
  if (P > 1 && B > 1) plan.send_elems = P * chunk;
  if (P > 1) plan.recv_elems = P * chunk;
  return plan;
}

int coarse_chunk_owner(const Problem& p, int rank, int k) {
  XS_ASSERT(k >= 0 && k < p.ranks, "ulysses: coarse chunk {} is outside 0 .. {}", k, p.ranks - 1);
  return (rank + 1 + k) % p.ranks;
}

FusedSignal default_signal(const Problem& p) {
  return p.head_dim == 64 || p.seq >= 32768 ? FusedSignal::per_slice : FusedSignal::per_cta;
}

uint32_t fused_signals_per_forward(const Problem& p, FusedSignal s, int grid, int consumer_wgs) {
  validate(p);
  XS_ASSERT(s != FusedSignal::automatic, "ulysses: resolve FusedSignal::automatic (default_signal) first");
  XS_ASSERT(grid >= 1 && consumer_wgs >= 1, "ulysses: grid and consumer_wgs must be >= 1 (got {}, {})", grid,
            consumer_wgs);
  if (s == FusedSignal::per_slice || s == FusedSignal::by_agent) return static_cast<uint32_t>(p.batch * (p.rows_per_rank() / 64) * p.heads_per_rank());
  const int64_t tiles = p.batch * (p.seq / kTileRows) * p.heads_per_rank();
  return static_cast<uint32_t>(consumer_wgs * std::min<int64_t>(grid, tiles));
}

FusedGeometry fused_geometry(const Problem& p, int rank) {
  validate(p);
  const RankLayout l = rank_layout(p, rank);
  FusedGeometry g;
  g.rows_per_rank = static_cast<int>(p.rows_per_rank());
  g.ranks = p.ranks;
  g.head0 = static_cast<int>(l.head0);
  g.stride_s = p.heads * p.head_dim;
  g.stride_b = p.rows_per_rank() * g.stride_s;
  g.head_dim = static_cast<int>(p.head_dim);
  return g;
}

namespace {
template <typename T>
std::vector<T>& buffer(std::vector<std::vector<T>>& bufs, Buf b) {
  const auto i = static_cast<std::size_t>(b);
  XS_ASSERT(i < bufs.size(), "ulysses plan: buffer {} missing", to_string(b));
  return bufs[i];
}

template <typename T>
void run_copy(const Copy2D& c, std::vector<std::vector<T>>& bufs) {
  auto& src = buffer(bufs, c.src);
  auto& dst = buffer(bufs, c.dst);
  if (c.height == 0 || c.width == 0) return;
  const int64_t src_end = c.src_off + (c.height - 1) * c.src_pitch + c.width;
  const int64_t dst_end = c.dst_off + (c.height - 1) * c.dst_pitch + c.width;
  XS_ASSERT(c.src_off >= 0 && src_end <= static_cast<int64_t>(src.size()),
            "ulysses plan: copy reads {} .. {} of {} ({} elements)", c.src_off, src_end, to_string(c.src), src.size());
  XS_ASSERT(c.dst_off >= 0 && dst_end <= static_cast<int64_t>(dst.size()),
            "ulysses plan: copy writes {} .. {} of {} ({} elements)", c.dst_off, dst_end, to_string(c.dst),
            dst.size());
  for (int64_t r = 0; r < c.height; ++r)
    for (int64_t e = 0; e < c.width; ++e) dst[c.dst_off + r * c.dst_pitch + e] = src[c.src_off + r * c.src_pitch + e];
}
}  // namespace

template <typename T>
void run_plans_on_host(const std::vector<ExchangePlan>& plans, std::vector<std::vector<std::vector<T>>>& buffers) {
  const int P = static_cast<int>(plans.size());
  XS_ASSERT(static_cast<int>(buffers.size()) == P, "ulysses plan: {} plans but {} ranks' buffers", P, buffers.size());
  for (int r = 0; r < P; ++r)
    for (const auto& c : plans[r].before) run_copy(c, buffers[r]);
  for (int a = 0; a < P; ++a) {
    for (const Transfer& t : plans[a].transfers) {
      XS_ASSERT(t.peer >= 0 && t.peer < P && t.peer != a, "ulysses plan: rank {} sends to bad peer {}", a, t.peer);
      const Transfer* back = nullptr;
      for (const Transfer& u : plans[t.peer].transfers)
        if (u.peer == a) back = &u;
      XS_ASSERT(back, "ulysses plan: rank {} sends to {}, which does not receive from it", a, t.peer);
      XS_ASSERT(back->count == t.count, "ulysses plan: rank {} sends {} elements to {}, which expects {}", a, t.count,
                t.peer, back->count);
      auto& src = buffer(buffers[a], t.send_buf);
      auto& dst = buffer(buffers[t.peer], back->recv_buf);
      XS_ASSERT(t.send_off >= 0 && t.send_off + t.count <= static_cast<int64_t>(src.size()) && back->recv_off >= 0 &&
                    back->recv_off + t.count <= static_cast<int64_t>(dst.size()),
                "ulysses plan: transfer {} -> {} out of bounds", a, t.peer);
      std::copy(src.begin() + t.send_off, src.begin() + t.send_off + t.count, dst.begin() + back->recv_off);
    }
  }
  for (int r = 0; r < P; ++r)
    for (const auto& c : plans[r].after) run_copy(c, buffers[r]);
}

template void run_plans_on_host<uint16_t>(const std::vector<ExchangePlan>&, std::vector<std::vector<std::vector<uint16_t>>>&);
template void run_plans_on_host<float>(const std::vector<ExchangePlan>&, std::vector<std::vector<std::vector<float>>>&);
template void run_plans_on_host<double>(const std::vector<ExchangePlan>&, std::vector<std::vector<std::vector<double>>>&);

std::vector<BenchConfig> bench_sweep(const std::vector<int>& ranks, int64_t min_seq, int64_t max_seq) {
  std::vector<BenchConfig> out;
  const int64_t hd[][2] = {{24, 128}, {40, 128}, {24, 64}};
  for (int P : ranks)
    for (const auto& x : hd)
      for (int64_t S = 4096; S <= 131072; S *= 2)
        if (S >= min_seq && S <= max_seq) out.push_back({S, P, x[0], x[1]});
  return out;
}

}  // namespace xstage::ulysses
