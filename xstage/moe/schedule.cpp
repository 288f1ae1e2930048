// Tile lists and the two schedulers (Expert-Wave, Interleaved). Both produce one
// global order that the persistent kernel's blocks take by ticket, so any item's
// dependencies (an L2 tile's L1 tiles) must come earlier in the order: the kernel
// then cannot deadlock, because every earlier ticket is held by a running block.
#include <algorithm>
#include <map>
#include <tuple>

#include "common/check.hpp"
#include "xstage/moe/moe.hpp"
#include "xstage/moe/order.hpp"
#include "xstage/hopper/tile_raster.hpp"

namespace xstage::moe {

namespace {

// Waves over the experts that have rows: wave w = non-empty experts
// [w*wave, (w+1)*wave). Empty experts have no tiles and no place in a wave.
std::vector<std::vector<int>> waves_of(const TileLists& t, int wave_experts) {
  std::vector<int> busy;
  for (int e = 0; e < t.experts; ++e)
    if (t.m_blocks[e] > 0) busy.push_back(e);
  std::vector<std::vector<int>> waves;
  for (std::size_t i = 0; i < busy.size(); i += wave_experts)
    waves.emplace_back(busy.begin() + i, busy.begin() + std::min(busy.size(), i + wave_experts));
  return waves;
}

// The tiles of `experts` (ascending) in list order. Lists are expert-major, so only
// the range from the first to the last of them is scanned.
std::vector<WorkItem> tiles_of(const std::vector<WorkItem>& all, const std::vector<int>& experts) {
  std::vector<WorkItem> out;
  if (experts.empty()) return out;
  const auto by_expert = [](const WorkItem& w, int e) { return w.expert < e; };
  const auto lo = std::lower_bound(all.begin(), all.end(), experts.front(), by_expert);
  const auto hi = std::lower_bound(lo, all.end(), experts.back() + 1, by_expert);
  for (auto it = lo; it != hi; ++it)
    if (std::binary_search(experts.begin(), experts.end(), it->expert)) out.push_back(*it);
  return out;
}

// Piece j of n of v (contiguous, sizes differ by at most one).
std::vector<WorkItem> piece(const std::vector<WorkItem>& v, int j, int n) {
  const std::size_t a = v.size() * j / n, b = v.size() * (j + 1) / n;
  return {v.begin() + a, v.begin() + b};
}

}  // namespace

const char* to_string(ScheduleKind k) { return k == ScheduleKind::expert_wave ? "expert_wave" : "interleaved"; }

ScheduleKind parse_schedule(const std::string& s) {
  if (s == "expert_wave") return ScheduleKind::expert_wave;
  if (s == "interleaved") return ScheduleKind::interleaved;
  XS_FAIL("unknown schedule '{}' (expert_wave | interleaved)", s);
}

FusedMaps fused_maps(const Problem& p, int max_rows) {
  XS_ASSERT(max_rows >= 1, "moe fused: max_rows must be >= 1 (got {})", max_rows);
  const long long epr = p.experts_per_rank();
  FusedMaps m{{"recv", max_rows, p.hidden},
              {"H", max_rows, p.intermediate},
              {"W1", epr * 2 * p.intermediate, p.hidden},
              {"W2", epr * p.hidden, p.intermediate}};
  for (const MapShape& s : {m.recv, m.h, m.w1, m.w2}) {
    XS_ASSERT(s.cols >= kTileK && s.cols % kTileK == 0, "moe fused: {} has {} columns, not a multiple of the K step {}",
              s.name, s.cols, kTileK);
    XS_ASSERT(s.rows >= 1 && s.rows < (1LL << 31) && s.cols < (1LL << 31),
              "moe fused: {} [{} x {}] is beyond TMA's 32-bit coordinates", s.name, s.rows, s.cols);
  }
  return m;
}

TileLists build_tiles(const Problem& p, const RankLayout& R, int raster_group) {
  XS_ASSERT(raster_group >= 1, "moe: raster_group must be >= 1 (got {})", raster_group);
  TileLists t;
  t.experts = p.experts_per_rank();
  t.l1_n_blocks = p.intermediate / kL1TileN;
  t.l2_n_blocks = p.hidden / kL2TileN;
  t.raster_group = raster_group;
  t.m_blocks.resize(t.experts);
  for (int e = 0; e < t.experts; ++e) {
    t.m_blocks[e] = (R.count(e) + kTileM - 1) / kTileM;
    for_each_grouped(t.m_blocks[e], t.l1_n_blocks, raster_group,
                     [&](int m, int n) { t.l1.push_back({TileKind::l1, e, m, n}); });
    for_each_grouped(t.m_blocks[e], t.l2_n_blocks, raster_group,
                     [&](int m, int n) { t.l2.push_back({TileKind::l2, e, m, n}); });
  }
  return t;
}

ExpertWaveScheduler::ExpertWaveScheduler(int wave_experts) : wave_experts_(wave_experts) {
  XS_ASSERT(wave_experts >= 1, "expert-wave scheduler: wave_experts must be >= 1 (got {})", wave_experts);
}

std::vector<WorkItem> ExpertWaveScheduler::order(const TileLists& t) const {
  std::vector<WorkItem> out;
  for (const auto& wave : waves_of(t, wave_experts_)) {
    const auto l1 = tiles_of(t.l1, wave), l2 = tiles_of(t.l2, wave);
    out.insert(out.end(), l1.begin(), l1.end());
    out.insert(out.end(), l2.begin(), l2.end());
  }
  return out;
}

InterleavedScheduler::InterleavedScheduler(int wave_experts, int lag, int burst_split)
    : wave_experts_(wave_experts), lag_(lag), burst_split_(burst_split) {
  XS_ASSERT(wave_experts >= 1, "interleaved scheduler: wave_experts must be >= 1 (got {})", wave_experts);
  XS_ASSERT(lag >= 1, "interleaved scheduler: lag must be >= 1 (got {})", lag);
  XS_ASSERT(burst_split >= 1, "interleaved scheduler: burst_split must be >= 1 (got {})", burst_split);
}

std::vector<WorkItem> InterleavedScheduler::order(const TileLists& t) const {
  const auto waves = waves_of(t, wave_experts_);
  const int W = static_cast<int>(waves.size());
  std::vector<WorkItem> out;
  // Prologue: L1 of the first `lag` waves (nothing to interleave with yet).
  for (int w = 0; w < std::min(lag_, W); ++w) {
    const auto l1 = tiles_of(t.l1, waves[w]);
    out.insert(out.end(), l1.begin(), l1.end());
  }
  // Step w: L2 of wave w in burst_split pieces, each followed by a piece of wave
  // w+lag's L1 -- the compute the Burst-Gap advisor wants between the bursts.
  for (int w = 0; w < W; ++w) {
    const auto l2 = tiles_of(t.l2, waves[w]);
    const auto l1 = w + lag_ < W ? tiles_of(t.l1, waves[w + lag_]) : std::vector<WorkItem>{};
    for (int j = 0; j < burst_split_; ++j) {
      const auto a = piece(l2, j, burst_split_), b = piece(l1, j, burst_split_);
      out.insert(out.end(), a.begin(), a.end());
      out.insert(out.end(), b.begin(), b.end());
    }
  }
  return out;
}

std::unique_ptr<Scheduler> make_scheduler(const ScheduleConfig& c) {
  if (c.kind == ScheduleKind::expert_wave) return std::make_unique<ExpertWaveScheduler>(c.wave_experts);
  return std::make_unique<InterleavedScheduler>(c.wave_experts, c.lag, c.burst_split);
}

void check_order(const TileLists& t, const std::vector<WorkItem>& order) {
  XS_ASSERT(order.size() == t.l1.size() + t.l2.size(), "schedule: {} items for {} L1 + {} L2 tiles", order.size(),
            t.l1.size(), t.l2.size());
  std::map<std::tuple<int, int, int, int>, int> seen;
  std::map<std::pair<int, int>, int> l1_done;  // (expert, m) -> L1 tiles so far
  for (const WorkItem& w : t.l1) seen[{0, w.expert, w.m_block, w.n_block}] = 0;
  for (const WorkItem& w : t.l2) seen[{1, w.expert, w.m_block, w.n_block}] = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const WorkItem& w = order[i];
    auto it = seen.find({static_cast<int>(w.kind), w.expert, w.m_block, w.n_block});
    XS_ASSERT(it != seen.end(), "schedule: item {} (kind {}, expert {}, m {}, n {}) is not a tile", i,
              static_cast<int>(w.kind), w.expert, w.m_block, w.n_block);
    XS_ASSERT(++it->second == 1, "schedule: item {} (expert {}, m {}, n {}) appears twice", i, w.expert, w.m_block,
              w.n_block);
    if (w.kind == TileKind::l1) {
      ++l1_done[{w.expert, w.m_block}];
    } else {
      const int done = l1_done[std::make_pair(w.expert, w.m_block)];
      XS_ASSERT(done == t.l1_n_blocks,
                "schedule: L2 item {} (expert {}, m {}) comes before its {} L1 tiles are all placed", i, w.expert,
                w.m_block, t.l1_n_blocks);
    }
  }
}

namespace {
OrderSpec spec_of(const ScheduleConfig& c, int l1_n_blocks, int l2_n_blocks, int raster_group) {
  OrderSpec s;
  s.interleaved = c.kind == ScheduleKind::interleaved;
  s.wave_experts = c.wave_experts;
  s.lag = c.lag;
  s.split = c.burst_split;
  s.l1_n_blocks = l1_n_blocks;
  s.l2_n_blocks = l2_n_blocks;
  s.raster_group = raster_group;
  XS_ASSERT(s.wave_experts >= 1 && s.lag >= 1 && s.split >= 1 && s.l1_n_blocks >= 1 && s.l2_n_blocks >= 1 &&
                raster_group >= 1,
            "moe: order spec needs wave_experts {}, lag {}, burst_split {}, column tiles {} / {} and raster group {} "
            "all >= 1",
            s.wave_experts, s.lag, s.split, s.l1_n_blocks, s.l2_n_blocks, raster_group);
  return s;
}

DispatchPlan plan_with_first(int first, int experts_local) {
  XS_ASSERT(experts_local >= 1, "moe: dispatch plan for {} local experts", experts_local);
  DispatchPlan d;
  d.first = std::clamp(first, 1, experts_local);
  const int rest = experts_local - d.first;
  d.step = std::max({1, d.first, (rest + kDispatchPasses - 1) / kDispatchPasses});
  return d;
}
}  // namespace

DispatchPlan dispatch_plan(const std::vector<WorkItem>& order, int experts_local) {
  int first = 0;
  for (const WorkItem& it : order) {
    if (it.kind == TileKind::l2) return plan_with_first(first, experts_local);
    first = std::max(first, it.expert + 1);
  }
  return plan_with_first(experts_local, experts_local);  // no L2 tile: one pass
}

DispatchPlan dispatch_plan(const OrderSpec& spec, int experts_local) {
  const long long first = static_cast<long long>(spec.wave_experts) * (spec.interleaved ? spec.lag : 1);
  return plan_with_first(static_cast<int>(std::min<long long>(first, experts_local)), experts_local);
}

OrderSpec order_spec(const ScheduleConfig& c, const Problem& p, int raster_group) {
  return spec_of(c, p.intermediate / kL1TileN, p.hidden / kL2TileN, raster_group);
}

std::vector<WorkItem> order_by_position(const TileLists& t, const ScheduleConfig& c) {
  const OrderSpec s = spec_of(c, t.l1_n_blocks, t.l2_n_blocks, t.raster_group);
  const int E = t.experts;
  std::vector<int> wave(E), l1_off(E), l2_off(E), l1_size(E + 1), l2_size(E + 1), l1_start(E + 1), l2_start(E + 1);
  const int waves = order_waves(s, E, t.m_blocks.data(), wave.data(), l1_off.data(), l2_off.data(), l1_size.data(),
                                l2_size.data(), l1_start.data(), l2_start.data());
  std::vector<WorkItem> out(t.l1.size() + t.l2.size(), WorkItem{TileKind::l1, -1, -1, -1});
  for (int e = 0; e < E; ++e) {
    const int mb = t.m_blocks[e];
    for (int j = 0; j < mb * (s.l1_n_blocks + s.l2_n_blocks); ++j) {
      const bool l2 = j >= mb * s.l1_n_blocks;
      const int jj = l2 ? j - mb * s.l1_n_blocks : j;
      int m = 0, n = 0;
      grouped_tile(jj, mb, l2 ? s.l2_n_blocks : s.l1_n_blocks, s.raster_group, &m, &n);
      const int pos = tile_position(s, waves, l2, wave[e], (l2 ? l2_off[e] : l1_off[e]) + jj, l1_size.data(),
                                    l2_size.data(), l1_start.data(), l2_start.data());
      XS_ASSERT(pos >= 0 && std::size_t(pos) < out.size() && out[std::size_t(pos)].expert < 0,
                "moe: closed-form order puts expert {} tile {} at {} (of {}), not a free place", e, j, pos, out.size());
      out[std::size_t(pos)] = {l2 ? TileKind::l2 : TileKind::l1, e, m, n};
    }
  }
  return out;
}

TileLists expected_tiles(const Problem& p, int raster_group) {
  const int epr = p.experts_per_rank();
  const long long rows = (long long)p.ranks * p.tokens_per_rank * p.topk;
  RankLayout R;
  R.expert_offset.resize(std::size_t(epr) + 1, 0);
  for (int e = 0; e < epr; ++e)  // expert e gets rows*(e+1)/E - rows*e/E: the mean, rounded
    R.expert_offset[std::size_t(e) + 1] = static_cast<int>(rows * (e + 1) / p.experts);
  return build_tiles(p, R, raster_group);
}

int occupancy_wave_experts(const TileLists& t, int sms) {
  XS_ASSERT(sms >= 1, "occupancy: sms must be >= 1 (got {})", sms);
  int experts = 0, tiles = 0;
  for (int e = 0; e < t.experts && tiles < sms; ++e) {
    if (t.m_blocks[e] == 0) continue;
    ++experts;
    tiles += t.m_blocks[e] * t.l1_n_blocks;
  }
  return std::max(1, experts);
}

}  // namespace xstage::moe
