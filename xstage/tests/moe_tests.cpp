// CPU tests of the MoE host side: validation, routing, layout, schedules,
// advisor-chosen configs and the host reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <random>
#include <set>
#include <tuple>

#include "common/check.hpp"
#include "xstage/moe/moe.hpp"
#include "xstage/hopper/tile_raster.hpp"
#include "xstage/bench/moe_bench.hpp"

namespace moe = xstage::moe;
namespace bg = xstage::burstgap;

namespace {

moe::Problem small(int P = 2, int T = 40, int E = 8, int K = 2, int H = 256, int I = 128) {
  return {P, T, E, K, H, I};
}

void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing '" << needle << "'";
  } catch (const common::Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(MoeProblem, RefusesBadShapes) {
  expect_error([] { moe::validate(small(2, 40, 8, 2, 100, 64)); }, "hidden (100) must be a positive multiple");
  expect_error([] { moe::validate(small(2, 40, 8, 2, 256, 96)); }, "intermediate (96)");
  expect_error([] { moe::validate(small(2, 40, 8, 2, 128, 128)); }, "hidden (128) must be a positive multiple of the L2 tile");
  expect_error([] { moe::validate(small(2, 40, 8, 2, 256, 64)); }, "intermediate (64)");
  expect_error([] { moe::validate(small(2, 40, 8, 9)); }, "top-k must be in 1..experts");
  expect_error([] { moe::validate(small(3, 40, 8, 2)); }, "divisible by the EP size");
  expect_error([] { moe::validate(small(4), 2); }, "4 ranks need 4 GPUs but only 2 are visible");
  expect_error([] { moe::validate(small(2, 0)); }, "tokens_per_rank");
  EXPECT_NO_THROW(moe::validate(small(8, 16, 64, 8), 8));
}

TEST(MoeBf16, RoundsToNearestEven) {
  EXPECT_EQ(moe::to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(moe::from_bf16(0x3f80), 1.0f);
  EXPECT_EQ(moe::to_bf16(1.0f + 1.0f / 256), 0x3f80);  // tie, even stays
  EXPECT_EQ(moe::to_bf16(1.0f + 3.0f / 256), 0x3f82);  // tie, rounds up to even
  EXPECT_TRUE(std::isnan(moe::from_bf16(moe::to_bf16(NAN))));
}

TEST(MoeRouting, FromLogitsTopkSoftmax) {
  const std::vector<float> logits{0, 3, 1, 3, /* token 1 */ -1, -2, 5, 0};
  const auto r = moe::route_from_logits(logits, 2, 4, 2);
  EXPECT_EQ(r.expert, (std::vector<int>{1, 3, 2, 3}));  // tie 1 vs 3 -> lower id first
  EXPECT_FLOAT_EQ(r.weight[0], 0.5f);
  EXPECT_NEAR(r.weight[2], 1.0 / (1.0 + std::exp(-5.0)), 1e-6);
  EXPECT_NEAR(r.weight[2] + r.weight[3], 1.0, 1e-6);
  expect_error([&] { moe::route_from_logits(logits, 2, 4, 5); }, "top-k");
}

// The one-scan top-k against a sort of every token's experts (larger logit first, lower
// id first among ties), on logits drawn from a few values so that ties are common.
TEST(MoeRouting, FromLogitsMatchesAFullSortWithTies) {
  std::mt19937 rng(11);
  for (auto [experts, topk] : {std::pair{16, 2}, std::pair{64, 6}, std::pair{8, 8}, std::pair{5, 1}}) {
    const int tokens = 300;
    std::vector<float> logits(std::size_t(tokens) * experts);
    for (auto& x : logits) x = float(int(rng() % 5)) - 2.0f;
    const auto r = moe::route_from_logits(logits, tokens, experts, topk);
    for (int t = 0; t < tokens; ++t) {
      const float* l = &logits[std::size_t(t) * experts];
      std::vector<int> idx(experts);
      std::iota(idx.begin(), idx.end(), 0);
      std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return l[a] > l[b]; });
      for (int j = 0; j < topk; ++j) ASSERT_EQ(r.expert[std::size_t(t) * topk + j], idx[j]) << t << " " << j;
    }
  }
  std::vector<float> bad(16, 0.0f);
  bad[5] = NAN;
  expect_error([&] { moe::route_from_logits(bad, 1, 16, 2); }, "not finite");
}

TEST(MoeRouting, SyntheticIsValidSeededAndSkewed) {
  const auto p = small(4, 512, 32, 4);
  const auto a = moe::synthetic_routing(p, {.zipf = 0, .seed = 3});
  const auto b = moe::synthetic_routing(p, {.zipf = 0, .seed = 3});
  EXPECT_NO_THROW(moe::validate(p, a));
  EXPECT_EQ(a[1].expert, b[1].expert);
  auto max_load = [&](const std::vector<moe::Routing>& r) {
    std::vector<int> n(p.experts, 0);
    for (auto& rr : r)
      for (int e : rr.expert) ++n[e];
    return *std::max_element(n.begin(), n.end());
  };
  const auto skew = moe::synthetic_routing(p, {.zipf = 1.2, .seed = 3});
  EXPECT_GT(max_load(skew), 2 * max_load(a));
  for (auto& rr : skew)
    for (int t = 0; t < rr.tokens; ++t) {
      float s = 0;
      for (int j = 0; j < rr.topk; ++j) s += rr.weight[t * rr.topk + j];
      EXPECT_NEAR(s, 1.0f, 1e-5);
    }
}

// Balanced routing: every expert exactly P * T * k / E pairs (within one when E does not
// divide it), k distinct experts per token, seeded, and not combinable with skew.
TEST(MoeRouting, BalancedGivesEveryExpertTheMeanCount) {
  for (auto [ranks, tokens, experts, topk] : {std::array{1, 8192, 256, 6}, std::array{4, 512, 32, 4},
                                              std::array{1, 100, 7, 3}, std::array{8, 64, 16, 16}}) {
    const auto p = small(ranks, tokens, experts, topk);
    const auto r = moe::synthetic_routing(p, {.seed = 3, .balanced = true});
    EXPECT_NO_THROW(moe::validate(p, r));
    std::vector<long> n(experts, 0);
    for (const auto& rr : r)
      for (int e : rr.expert) ++n[size_t(e)];
    const long pairs = long(ranks) * tokens * topk;
    for (long c : n) EXPECT_TRUE(c == pairs / experts || c == pairs / experts + 1) << c << " of " << pairs;
    for (const auto& rr : r)
      for (int t = 0; t < rr.tokens; ++t) {
        float s = 0;
        for (int j = 0; j < rr.topk; ++j) s += rr.weight[size_t(t * rr.topk + j)];
        EXPECT_NEAR(s, 1.0f, 1e-5);
      }
    EXPECT_EQ(moe::synthetic_routing(p, {.seed = 3, .balanced = true})[0].expert, r[0].expert);
    EXPECT_NE(moe::synthetic_routing(p, {.seed = 4, .balanced = true})[0].expert, r[0].expert);
  }
  expect_error([] { moe::synthetic_routing(small(2, 64, 16, 2), {.zipf = 1.2, .balanced = true}); },
               "balanced routing takes no zipf");
}

TEST(MoeRouting, EmptyExpertsAndSameRankPairs) {
  const auto p = small(2, 256, 8, 2);
  const auto r = moe::synthetic_routing(p, {.empty_experts = 3, .same_rank = 1.0, .seed = 5});
  std::vector<int> n(p.experts, 0);
  int same = 0;
  for (auto& rr : r)
    for (int t = 0; t < rr.tokens; ++t) {
      for (int j = 0; j < 2; ++j) ++n[rr.expert[t * 2 + j]];
      same += rr.expert[t * 2] / 4 == rr.expert[t * 2 + 1] / 4;
    }
  EXPECT_EQ(std::count(n.begin(), n.end(), 0), 3);
  EXPECT_GT(same, 256);  // most pairs share a rank (unless slot 0's rank ran out)
}

TEST(MoeLayout, InvariantsForEverySize) {
  for (int P : {1, 2, 4, 8})
    for (double zipf : {0.0, 1.5}) {
      const auto p = small(P, 37, 16, 3);
      const auto r = moe::synthetic_routing(p, {.zipf = zipf, .empty_experts = 2, .same_rank = 0.3, .seed = 11});
      const auto L = moe::build_layout(p, r);
      EXPECT_NO_THROW(moe::check_layout(L, r)) << P;
      long long rows = 0;
      for (auto& R : L.ranks) rows += R.rows();
      EXPECT_EQ(rows, (long long)P * 37 * 3);
    }
}

TEST(MoeLayout, EightRankIndexMapsByHand) {
  // P = 8, E = 16 (2 per rank), k = 2, 1 token per rank: token of rank s goes to
  // experts (2s+2) mod 16 and (2s+3) mod 16, i.e. both on rank s+1.
  const moe::Problem p{8, 1, 16, 2, 256, 128};
  std::vector<moe::Routing> r;
  for (int s = 0; s < 8; ++s) r.push_back({1, 2, {(2 * s + 2) % 16, (2 * s + 3) % 16}, {0.5f, 0.5f}});
  const auto L = moe::build_layout(p, r);
  moe::check_layout(L, r);
  for (int s = 0; s < 8; ++s) {
    const int d = (s + 1) % 8;
    EXPECT_EQ(L.ranks[s].send_rank, (std::vector<int>{d, d}));
    EXPECT_EQ(L.ranks[s].send_row, (std::vector<int>{0, 1}));  // expert 0 segment row 0, expert 1 segment row 1
    EXPECT_EQ(L.ranks[d].expert_offset, (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(L.ranks[d].recv_src_rank, (std::vector<int>{s, s}));
    EXPECT_EQ(L.ranks[d].recv_src_slot, (std::vector<int>{0, 1}));
    EXPECT_EQ(L.ranks[d].recv_from[s], 2);
  }
  // Grouping within an expert: by source rank, then (token, slot).
  const moe::Problem q{8, 2, 16, 1, 256, 128};
  std::vector<moe::Routing> r2;
  for (int s = 0; s < 8; ++s) r2.push_back({2, 1, {0, 0}, {1, 1}});  // everyone -> expert 0 on rank 0
  const auto L2 = moe::build_layout(q, r2);
  EXPECT_EQ(L2.ranks[0].rows(), 16);
  for (int row = 0; row < 16; ++row) {
    EXPECT_EQ(L2.ranks[0].recv_src_rank[row], row / 2);
    EXPECT_EQ(L2.ranks[0].recv_src_slot[row], row % 2);
  }
  for (int d = 1; d < 8; ++d) EXPECT_EQ(L2.ranks[d].rows(), 0);
}

TEST(MoeLayout, DispatchCombineIdentityRoundTripIsBitwise) {
  for (int P : {2, 4, 8}) {
    const auto p = small(P, 29, 16, 4);
    const auto r = moe::synthetic_routing(p, {.zipf = 1.0, .empty_experts = 3, .same_rank = 0.5, .seed = 2});
    const auto L = moe::build_layout(p, r);
    const auto x = moe::random_tokens(p, 9);
    const auto comb = moe::combine_rows(L, moe::dispatch_rows(L, x, p.hidden), p.hidden);
    for (int s = 0; s < P; ++s)
      for (int t = 0; t < p.tokens_per_rank; ++t)
        for (int j = 0; j < p.topk; ++j)
          ASSERT_TRUE(std::equal(&x[s][t * p.hidden], &x[s][(t + 1) * p.hidden],
                                 &comb[s][(t * p.topk + j) * p.hidden]))
              << P << " " << s << " " << t << " " << j;
  }
}

// The host-link combine drain: each owner's (local expert, source) ranges of its stage
// copied into the sources' return rows give every (token, slot) its row, as the direct
// combine does, also with several experts' copies merged; a copy holds one expert's rows
// from one source, never the owner's own, and fills each return row once; all experts'
// copies merge into one per source.
TEST(MoeLayout, DrainedCombineEqualsTheDirectOne) {
  for (int P : {2, 4, 8}) {
    const auto p = small(P, 29, 16, 4);
    const auto r = moe::synthetic_routing(p, {.zipf = 1.0, .empty_experts = 3, .same_rank = 0.5, .seed = 5});
    const auto L = moe::build_layout(p, r);
    const int epr = p.experts_per_rank();
    // Recv rows that differ from each other: the row's index in every element.
    std::vector<std::vector<moe::bf16_bits>> recv(P);
    for (int d = 0; d < P; ++d) {
      recv[d].resize(std::size_t(L.ranks[d].rows()) * p.hidden);
      for (std::size_t i = 0; i < recv[d].size(); ++i) recv[d][i] = moe::bf16_bits(1000 * d + i / p.hidden);
    }
    for (int group : {1, 2, 3, epr})
      EXPECT_EQ(moe::combine_rows_drained(L, recv, p.hidden, group), moe::combine_rows(L, recv, p.hidden))
          << P << " " << group;
    std::vector<int> filled(P, 0);
    for (int d = 0; d < P; ++d) {
      const auto& R = L.ranks[d];
      const std::vector<int> stage = moe::drain_stage_rows(R, P);
      std::vector<int> recv_of(R.rows(), -1);  // the inverse
      for (int row = 0; row < R.rows(); ++row) {
        ASSERT_TRUE(stage[row] >= 0 && stage[row] < R.rows() && recv_of[stage[row]] < 0) << P << " " << row;
        recv_of[stage[row]] = row;
      }
      std::vector<moe::DrainCopy> all;
      std::set<int> sources;
      for (int e = 0; e < epr; ++e)
        for (const auto& c : moe::drain_copies(R, e, P)) {
          EXPECT_NE(c.dst_rank, d);
          for (int i = c.src_row; i < c.src_row + c.rows; ++i) {
            const int row = recv_of[i];
            EXPECT_TRUE(row >= R.expert_offset[e] && row < R.expert_offset[e + 1] && R.recv_src_rank[row] == c.dst_rank)
                << "P " << P << " owner " << d << " expert " << e << " stage row " << i;
          }
          filled[c.dst_rank] += c.rows;
          sources.insert(c.dst_rank);
          all.push_back(c);
        }
      EXPECT_EQ(moe::merge_drain_copies(all).size(), sources.size()) << P << " " << d;
    }
    for (int s = 0; s < P; ++s) {
      int remote = 0;
      for (int d : L.ranks[s].send_rank) remote += d != s;
      EXPECT_EQ(filled[s], remote) << "P " << P << " rank " << s;
    }
  }
}

// The drain's groups: experts in the order given, `experts_per_copy` at a time (the last
// group shorter), each group's copies merged; zero per copy is refused.
TEST(MoeLayout, GroupsTheDrainInTheOrderGiven) {
  using C = moe::DrainCopy;
  const std::vector<std::vector<C>> copies{{{0, 1, 0, 4}}, {{4, 1, 4, 2}, {0, 2, 0, 3}}, {}};
  const auto groups = moe::group_drain(copies, 2);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].first, 0);
  EXPECT_EQ(groups[0].count, 2);
  EXPECT_EQ(groups[0].copies, (std::vector<C>{{0, 1, 0, 6}, {0, 2, 0, 3}}));
  EXPECT_EQ(groups[1].first, 2);
  EXPECT_EQ(groups[1].count, 1);
  EXPECT_TRUE(groups[1].copies.empty());
  EXPECT_EQ(moe::group_drain(copies, 5).size(), 1u);
  EXPECT_THROW(moe::group_drain(copies, 0), std::exception);
}

TEST(MoeLayout, MergesOnlyCopiesThatContinueEachOther) {
  using C = moe::DrainCopy;
  // Contiguous in both (merged), a gap in the return rows, another destination.
  const auto out = moe::merge_drain_copies({{10, 1, 0, 4}, {0, 2, 0, 5}, {14, 1, 4, 2}, {16, 1, 7, 1}});
  EXPECT_EQ(out, (std::vector<C>{{10, 1, 0, 6}, {16, 1, 7, 1}, {0, 2, 0, 5}}));
}

TEST(MoeLayout, RejectsBadRouting) {
  const auto p = small(2, 2, 8, 2);
  std::vector<moe::Routing> r(2, moe::Routing{2, 2, {0, 1, 2, 2}, {1, 1, 1, 1}});
  expect_error([&] { moe::build_layout(p, r); }, "names expert 2 twice");
  r[0].expert = {0, 8, 1, 2};
  r[1].expert = {0, 1, 2, 3};
  expect_error([&] { moe::build_layout(p, r); }, "expert 8");
}

namespace {
struct Case {
  moe::Problem p;
  moe::TileLists t;
};
Case tiles_case(double zipf, int empty = 0) {
  const moe::Problem p{4, 2048, 64, 6, 1024, 512};
  const auto r = moe::synthetic_routing(p, {.zipf = zipf, .empty_experts = empty, .seed = 4});
  const auto L = moe::build_layout(p, r);
  return {p, moe::build_tiles(p, L.ranks[1])};
}
int longest_l2_run(const std::vector<moe::WorkItem>& o) {
  int best = 0, run = 0;
  for (auto& w : o) {
    run = w.kind == moe::TileKind::l2 ? run + 1 : 0;
    best = std::max(best, run);
  }
  return best;
}
}  // namespace

// The tile time is the longer of the wgmma time and the weight slab's stream from HBM:
// an expert with one m block streams its whole slab per tile (weight-bound at these
// shapes), one with a full raster group of m blocks reads it once per 16 tiles
// (compute-bound).
TEST(MoeSchedule, TileTimeIsBoundByFlopsOrByTheWeightSlab) {
  const moe::Problem p{2, 512, 256, 6, 3072, 8192};
  const moe::TileTimeModel m;
  const double flop_ns = 2.0 * moe::kTileM * 2 * moe::kL1TileN * p.hidden / (m.sm_tflops * 1e3);
  const double slab_ns = 2.0 * moe::kL1TileN * p.hidden * 2 / (m.hbm_gbps / m.gpu_sms);
  ASSERT_GT(slab_ns, flop_ns);
  EXPECT_NEAR(moe::l1_tile_ns(p, m, 1), slab_ns + m.tile_overhead_ns, 1e-6);
  EXPECT_NEAR(moe::l1_tile_ns(p, m, moe::kMoeRasterGroup), flop_ns + m.tile_overhead_ns, 1e-6);
  EXPECT_NEAR(moe::l1_tile_ns(p, m, 100), moe::l1_tile_ns(p, m, moe::kMoeRasterGroup), 1e-9);  // one read per group
  // tiles_time: the sum over tiles, each at its expert's m blocks.
  moe::TileLists t;
  t.experts = 2;
  t.m_blocks = {1, 16};
  t.raster_group = moe::kMoeRasterGroup;
  t.l1_n_blocks = p.intermediate / moe::kL1TileN;
  t.l2_n_blocks = p.hidden / moe::kL2TileN;
  const auto tt = moe::tiles_time(p, t, m);
  const double want = t.l1_n_blocks * (moe::l1_tile_ns(p, m, 1) + 16 * moe::l1_tile_ns(p, m, 16)) +
                      t.l2_n_blocks * (moe::l2_tile_ns(p, m, 1) + 16 * moe::l2_tile_ns(p, m, 16));
  EXPECT_NEAR(tt.total_ns, want, 1e-6 * want);
  EXPECT_NEAR(tt.l1_mean_ns, (moe::l1_tile_ns(p, m, 1) + 16 * moe::l1_tile_ns(p, m, 16)) / 17, 1e-6);
}

// The ticket simulation by hand: one expert, one row block, two L1 and two L2 tiles.
// A CTA asks for its next item when the ring holds its current one's last K steps; an
// L2 tile starts once both L1 tiles of its row block have ended; the weight stream
// bounds the whole from below.
TEST(MoeSchedule, OrderTimeSimulatesTicketsAndDependencies) {
  const moe::Problem p{1, 512, 8, 2, 3072, 8192};
  moe::TileTimeModel m;
  m.hbm_gbps = 1e15;  // no stream bound
  moe::TileLists t;
  t.experts = 1, t.m_blocks = {1}, t.raster_group = moe::kMoeRasterGroup, t.l1_n_blocks = 2, t.l2_n_blocks = 2;
  using K = moe::TileKind;
  const std::vector<moe::WorkItem> order = {{K::l1, 0, 0, 0}, {K::l1, 0, 0, 1}, {K::l2, 0, 0, 0}, {K::l2, 0, 0, 1}};
  const double a = moe::l1_tile_ns(p, m, 1), b = moe::l2_tile_ns(p, m, 1);
  EXPECT_NEAR(moe::order_time_ns(p, t, order, 1, m), 2 * a + 2 * b, 1e-6);
  EXPECT_NEAR(moe::order_time_ns(p, t, order, 2, m), a + b, 1e-6);
  EXPECT_NEAR(moe::order_time_ns(p, t, order, 4, m), a + b, 1e-6);  // the L2 tiles wait for the L1 ones
  // Three CTAs: the third takes an L2 tile at 0 and waits until a; the last L2 tile
  // goes to the first CTA that asks again (near the end of its L1 tile) and starts at a.
  EXPECT_NEAR(moe::order_time_ns(p, t, order, 3, m), a + b, 1e-6);
  // A slow HBM bounds the order from below: the slabs over the blocks' share of it.
  m.hbm_gbps = 1.0;
  const double slabs = (2.0 * moe::kL1TileN * p.hidden * 2 + double(moe::kL2TileN) * p.intermediate * 2) * 2;
  EXPECT_NEAR(moe::order_time_ns(p, t, order, m.gpu_sms, m), slabs, 1e-6 * slabs);
  EXPECT_NEAR(moe::order_time_ns(p, t, order, m.gpu_sms / 2, m), slabs * m.gpu_sms / (m.gpu_sms / 2), 1e-6 * slabs);
  EXPECT_THROW(moe::order_time_ns(p, t, order, 0, m), std::exception);
}

// Interleaved over Expert-Wave by the simulation, at EP = 1 on 132 SMs: where the tiles
// are compute-bound and a wave is one expert (8192 tokens, I 8192), Expert-Wave's L2
// tiles wait for their row blocks and Interleaved's do not; where the weights stream
// (512 tokens) the HBM bound is the same for both orders.
TEST(MoeSchedule, PredictedOrderSpeedupFromTheSimulation) {
  const auto host = bg::read_params_or_default("").find("host", "st16");
  auto predicted = [&](int tokens) {
    const moe::BenchConfig c{.tokens_per_rank = tokens, .experts = 128, .topk = 6, .hidden = 3072,
                             .intermediate = 8192, .ep = 1, .routing = "uniform"};
    const moe::Problem p = c.problem();
    const auto t = moe::build_tiles(p, moe::build_layout(p, moe::synthetic_routing(p, c.synthetic())).ranks[0]);
    const auto il = moe::choose_schedule(moe::ScheduleKind::interleaved, p, t, 132, host);
    auto ew = il;
    ew.kind = moe::ScheduleKind::expert_wave;
    const moe::TileTimeModel m;
    const double want = moe::order_time_ns(p, t, moe::make_scheduler(ew)->order(t), 132, m) /
                        moe::order_time_ns(p, t, moe::make_scheduler(il)->order(t), 132, m);
    EXPECT_DOUBLE_EQ(moe::order_times(p, t, il).speedup(), want);
    return want;
  };
  EXPECT_GT(predicted(8192), 1.05);
  EXPECT_NEAR(predicted(512), 1.0, 0.01);
}

TEST(MoeSchedule, TileListsCoverRows) {
  const auto c = tiles_case(0.0, 5);
  int l1 = 0;
  for (int e = 0; e < c.t.experts; ++e) l1 += c.t.m_blocks[e] * c.t.l1_n_blocks;
  EXPECT_EQ(int(c.t.l1.size()), l1);
  EXPECT_EQ(c.t.l2.size(), c.t.l1.size() / c.t.l1_n_blocks * c.t.l2_n_blocks);
}

TEST(MoeSchedule, BothSchedulersCoverEveryTileOnceInDependencyOrder) {
  for (double zipf : {0.0, 1.3})
    for (int empty : {0, 9}) {
      const auto c = tiles_case(zipf, empty);
      for (int wave : {1, 2, 3, 16}) {
        EXPECT_NO_THROW(moe::check_order(c.t, moe::ExpertWaveScheduler(wave).order(c.t)));
        for (int lag : {1, 2, 3})
          for (int split : {1, 2, 5})
            EXPECT_NO_THROW(moe::check_order(c.t, moe::InterleavedScheduler(wave, lag, split).order(c.t)))
                << wave << " " << lag << " " << split;
      }
    }
}

// The closed form the GPU planner uses (xstage/moe/order.hpp) puts every tile where the
// schedulers put it: skewed and empty experts, every wave size, lag, split and raster
// group here, and tile lists whose m blocks span several raster groups.
TEST(MoeSchedule, ClosedFormOrderEqualsTheSchedulers) {
  int cases = 0;
  for (double zipf : {0.0, 1.3})
    for (int empty : {0, 9})
      for (int group : {1, 3, moe::kMoeRasterGroup}) {
        const auto base = tiles_case(zipf, empty);
        const auto L = moe::build_layout(base.p, moe::synthetic_routing(base.p, {.zipf = zipf, .empty_experts = empty, .seed = 4}));
        const auto t = moe::build_tiles(base.p, L.ranks[1], group);
        for (int wave : {1, 2, 3, 16, 64})
          for (int lag : {1, 2, 3})
            for (int split : {1, 2, 5, 64}) {
              moe::ScheduleConfig c;
              c.kind = moe::ScheduleKind::interleaved;
              c.wave_experts = wave, c.lag = lag, c.burst_split = split;
              ASSERT_EQ(moe::order_by_position(t, c), moe::make_scheduler(c)->order(t))
                  << "interleaved zipf " << zipf << " empty " << empty << " group " << group << " wave " << wave
                  << " lag " << lag << " split " << split;
              c.kind = moe::ScheduleKind::expert_wave;
              if (lag == 1 && split == 1)
                ASSERT_EQ(moe::order_by_position(t, c), moe::make_scheduler(c)->order(t)) << "expert-wave " << wave;
              ++cases;
            }
      }
  EXPECT_EQ(cases, 2 * 2 * 3 * 5 * 3 * 4);
  // A single expert with more m blocks than one raster group, and an empty list.
  const moe::Problem p{1, 4096, 2, 2, 256, 256};
  moe::RankLayout R;
  R.expert_offset = {0, 20 * moe::kTileM - 5, 20 * moe::kTileM - 5};
  const auto t = moe::build_tiles(p, R, 6);
  moe::ScheduleConfig c{moe::ScheduleKind::interleaved, 132, 1, 1, 3, ""};
  EXPECT_EQ(moe::order_by_position(t, c), moe::make_scheduler(c)->order(t));
  R.expert_offset = {0, 0, 0};
  EXPECT_TRUE(moe::order_by_position(moe::build_tiles(p, R, 6), c).empty());
}

// The kernel's dispatch passes: the first covers every expert whose L1 tiles come
// before the order's first L2 tile (what the tiles start with), the passes cover all
// local experts in at most kDispatchPasses more, and the plan from the config (used
// before the routing is known) equals the plan from the order when no expert is empty.
TEST(MoeSchedule, FirstDispatchPassCoversWhatTheFirstTilesNeed) {
  int cases = 0;
  for (double zipf : {0.0, 1.3})
    for (int empty : {0, 9}) {
      const auto c = tiles_case(zipf, empty);
      const int epr = c.p.experts_per_rank();
      for (int wave : {1, 2, 3, 16, 64})
        for (int lag : {1, 2, 3})
          for (moe::ScheduleKind kind : {moe::ScheduleKind::expert_wave, moe::ScheduleKind::interleaved}) {
            moe::ScheduleConfig cfg;
            cfg.kind = kind, cfg.wave_experts = wave, cfg.lag = lag, cfg.burst_split = 2;
            const auto order = moe::make_scheduler(cfg)->order(c.t);
            const moe::DispatchPlan d = moe::dispatch_plan(order, epr);
            SCOPED_TRACE(fmt::format("zipf {} empty {} wave {} lag {} {}", zipf, empty, wave, lag,
                                     kind == moe::ScheduleKind::interleaved ? "IL" : "EW"));
            ASSERT_GE(d.first, 1);
            ASSERT_LE(d.first, epr);
            ASSERT_GE(d.step, 1);
            for (const auto& it : order) {
              if (it.kind == moe::TileKind::l2) break;
              EXPECT_LT(it.expert, d.first);
            }
            const int passes = (epr - d.first + d.step - 1) / d.step;
            EXPECT_LE(passes, moe::kDispatchPasses);
            EXPECT_GE(d.first + passes * d.step, epr);
            if (empty == 0) {
              const auto spec = moe::order_spec(cfg, c.p, moe::kMoeRasterGroup);
              const moe::DispatchPlan ds = moe::dispatch_plan(spec, epr);
              EXPECT_EQ(ds.first, d.first);
              EXPECT_EQ(ds.step, d.step);
            }
            ++cases;
          }
    }
  EXPECT_EQ(cases, 2 * 2 * 5 * 3 * 2);
  // No overlap: one pass of every expert.
  EXPECT_EQ(moe::dispatch_plan(std::vector<moe::WorkItem>{}, 16).first, 16);
  EXPECT_EQ(moe::dispatch_plan(std::vector<moe::WorkItem>{{moe::TileKind::l1, 3, 0, 0}}, 16).first, 16);
  // 256 local experts, first wave of 4: 252 left in 8 passes of 32.
  moe::OrderSpec s;
  s.wave_experts = 4;
  EXPECT_EQ(moe::dispatch_plan(s, 256).first, 4);
  EXPECT_EQ(moe::dispatch_plan(s, 256).step, 32);
  s.interleaved = true, s.lag = 3;
  EXPECT_EQ(moe::dispatch_plan(s, 256).first, 12);
}

TEST(MoeSchedule, PiecesAndGroupedTilesInClosedForm) {
  for (int n : {0, 1, 7, 64})
    for (int split : {1, 3, 8, 100}) {
      int q = 0;
      for (int j = 0; j < split; ++j)  // piece j holds [n*j/split, n*(j+1)/split)
        for (; q < moe::piece_start(n, j + 1, split); ++q) EXPECT_EQ(moe::piece_of(q, n, split), j) << n << " " << split;
      EXPECT_EQ(q, n);
    }
  for (int mb : {1, 5, 17})
    for (int nb : {1, 4})
      for (int g : {1, 4, 16}) {
        int j = 0;
        xstage::for_each_grouped(mb, nb, g, [&](int m, int n) {
          int gm = -1, gn = -1;
          moe::grouped_tile(j++, mb, nb, g, &gm, &gn);
          EXPECT_EQ(std::pair(gm, gn), std::pair(m, n)) << mb << " " << nb << " " << g << " " << j - 1;
        });
      }
}

TEST(MoeSchedule, ExpectedTilesGiveTheMeanCount) {
  const moe::Problem p{4, 2048, 64, 6, 1024, 512};  // 4*2048*6/64 = 768 rows = 6 m blocks per expert
  const auto t = moe::expected_tiles(p, 4);
  ASSERT_EQ(t.experts, 16);
  for (int e = 0; e < t.experts; ++e) EXPECT_EQ(t.m_blocks[e], 6);
  EXPECT_EQ(t.raster_group, 4);
  const moe::Problem q{1, 100, 16, 2, 256, 256};  // 12.5 rows per expert: 12 or 13, 200 in all
  const auto u = moe::expected_tiles(q);
  int rows_blocks = 0;
  for (int e = 0; e < u.experts; ++e) rows_blocks += u.m_blocks[e];
  EXPECT_EQ(rows_blocks, 16);
  moe::ScheduleConfig c;
  c.wave_experts = 0;
  expect_error([&] { moe::order_spec(c, p, 16); }, "wave_experts 0");
}

// The GPU planner's buffer sizes cover the worst case: one expert per rank takes at most
// one row per token (a token's experts are distinct), and the item capacity bounds the
// orders of every layout of up to max_rows rows.
TEST(MoeRouteSizes, CoverTheWorstCase) {
  const moe::Problem p{4, 700, 64, 6, 1024, 512};
  EXPECT_EQ(moe::route::chunks_per_rank(p), (700 * 6 + 511) / 512);
  EXPECT_EQ(moe::route::chunk_count_size(p), std::size_t(4) * 9 * 64);
  EXPECT_EQ(moe::route::max_recv_rows(p), 4 * 700 * 6);
  EXPECT_EQ(moe::route::max_recv_rows({4, 700, 4, 2, 256, 256}), 4 * 700);  // E/P = 1 < k
  EXPECT_EQ(moe::route::max_m_blocks(p), (4 * 700 + 127) / 128);
  // Orders of skewed layouts never exceed the capacity.
  for (double zipf : {0.0, 1.5, 3.0})
    for (int empty : {0, 10}) {
      const auto L = moe::build_layout(p, moe::synthetic_routing(p, {.zipf = zipf, .empty_experts = empty, .seed = 9}));
      for (const auto& R : L.ranks) {
        const auto t = moe::build_tiles(p, R);
        EXPECT_LE(int(t.l1.size() + t.l2.size()), moe::route::item_capacity(p, moe::route::max_recv_rows(p)));
        for (int e = 0; e < t.experts; ++e) EXPECT_LE(t.m_blocks[e], moe::route::max_m_blocks(p));
      }
    }
  expect_error([] { moe::route::max_recv_rows({8, 1 << 28, 64, 8, 256, 256}); }, "over 2^30");
}

TEST(MoeSchedule, CheckOrderCatchesViolations) {
  const auto c = tiles_case(0.0);
  auto o = moe::ExpertWaveScheduler(2).order(c.t);
  auto bad = o;
  std::swap(bad.front(), bad.back());  // an L2 tile first
  expect_error([&] { moe::check_order(c.t, bad); }, "before its");
  bad = o;
  bad[1] = bad[0];
  expect_error([&] { moe::check_order(c.t, bad); }, "twice");
  o.pop_back();
  expect_error([&] { moe::check_order(c.t, o); }, "items for");
}

TEST(MoeSchedule, InterleavingPutsL1BetweenL2Bursts) {
  const auto c = tiles_case(0.0);
  const int wave = moe::occupancy_wave_experts(c.t, 132);
  const auto ew = moe::ExpertWaveScheduler(wave).order(c.t);
  const auto il = moe::InterleavedScheduler(wave, 1, 4).order(c.t);
  const int l2_per_wave = int(c.t.l2.size()) / ((c.t.experts + wave - 1) / wave);
  // Up to the last L1 tile (the final wave has no later L1 to interleave with).
  auto head = [](std::vector<moe::WorkItem> o) {
    while (!o.empty() && o.back().kind == moe::TileKind::l2) o.pop_back();
    return o;
  };
  EXPECT_GE(longest_l2_run(head(ew)), l2_per_wave - c.t.l2_n_blocks);
  EXPECT_LE(longest_l2_run(head(il)), (l2_per_wave + 3) / 4 + c.t.l2_n_blocks);
  // Between two L2 pieces of one wave (not the last) there is L1 work.
  int switches = 0;
  for (std::size_t i = 1; i < il.size(); ++i) switches += il[i - 1].kind == moe::TileKind::l2 && il[i].kind == moe::TileKind::l1;
  EXPECT_GE(switches, 4 * (c.t.experts / wave - 1));
}

TEST(MoeSchedule, OccupancyWaveFillsTheSms) {
  const auto c = tiles_case(0.0);
  const int w = moe::occupancy_wave_experts(c.t, 132);
  int tiles = 0;
  for (int e = 0; e < w; ++e) tiles += c.t.m_blocks[e] * c.t.l1_n_blocks;
  EXPECT_GE(tiles, 132);
  EXPECT_EQ(moe::occupancy_wave_experts(c.t, 1), 1);
}

TEST(MoeAdvisor, ChoiceFollowsTheParameters) {
  const auto c = tiles_case(0.0);
  bg::ModelParams roomy = bg::example_params("peer");
  roomy.capacity_bytes_gpu = 1e12;
  roomy.capacity_bytes_per_sm.reset();
  roomy.capacity_scope = bg::CapacityScope::gpu;
  roomy.drain_GBps = 1e5;
  bg::ModelParams tight = roomy;
  tight.drain_GBps = 200;
  tight.capacity_bytes_gpu = 2e5;

  const auto ew = moe::choose_schedule(moe::ScheduleKind::expert_wave, c.p, c.t, 132, tight);
  EXPECT_EQ(ew.burst_split, 1);
  EXPECT_EQ(ew.wave_experts, moe::occupancy_wave_experts(c.t, 132));
  const auto a = moe::choose_schedule(moe::ScheduleKind::interleaved, c.p, c.t, 132, roomy);
  const auto b = moe::choose_schedule(moe::ScheduleKind::interleaved, c.p, c.t, 132, tight);
  EXPECT_EQ(a.burst_split, 1) << a.reason;  // nothing to fix: fewest switches
  EXPECT_GT(b.burst_split, 1) << b.reason;  // small capacity: split the bursts
  EXPECT_NE(b.reason.find("advisor says"), std::string::npos);
  // The profile the advisor saw shrinks with the split and keeps the total bytes.
  const auto pa = moe::burst_profile(a, c.p, c.t, {}), pb = moe::burst_profile(b, c.p, c.t, {});
  EXPECT_LT(pb.bytes_per_burst, pa.bytes_per_burst);
  EXPECT_EQ(pb.bursts, pa.bursts * b.burst_split);
  EXPECT_NO_THROW(moe::check_order(c.t, moe::make_scheduler(b)->order(c.t)));
}

TEST(MoeAdvisor, MeasuredH200ParamsGiveAValidChoice) {
  const char* src = std::getenv("XSTAGE_SOURCE_DIR");
  if (!src) GTEST_SKIP() << "XSTAGE_SOURCE_DIR not set";
  const auto params = bg::read_params(std::filesystem::path(src) / "xstage/data/h200_params.json");
  const auto c = tiles_case(1.0);
  const auto s = moe::choose_schedule(moe::ScheduleKind::interleaved, c.p, c.t, 132, params.find("peer", "st16"));
  EXPECT_GE(s.burst_split, 1);
  EXPECT_GE(s.lag, 1);
  EXPECT_NO_THROW(moe::check_order(c.t, moe::make_scheduler(s)->order(c.t)));
}

TEST(MoeReference, MatchesNaiveBitwise) {
  for (int P : {1, 2, 4, 8}) {
    const auto p = small(P, 13, 8, 3, 256, 128);
    const auto r = moe::synthetic_routing(p, {.zipf = 1.0, .empty_experts = 2, .same_rank = 0.5, .seed = 8});
    const auto w = moe::random_weights(p, 3);
    const auto x = moe::random_tokens(p, 4);
    const auto ref = moe::reference_forward(p, r, moe::build_layout(p, r), w, x);
    const auto naive = moe::naive_forward(p, r, w, x);
    EXPECT_EQ(ref, naive) << P;
  }
}

TEST(MoeReference, ClosedFormSingleExpert) {
  // One expert, k = 1, weight 1, W1 gate = identity-like, up = 1, W2 picks column:
  // gate_j = x_j (j < I), up_j = sum(x) ... keep it simple: all-zero W2 gives 0,
  // and an x of zeros gives 0 for any weights.
  constexpr int H = 256, I = 128;
  const moe::Problem p{1, 3, 1, 1, H, I};
  std::vector<moe::Routing> r{{3, 1, {0, 0, 0}, {1, 1, 1}}};
  auto w = moe::random_weights(p, 1);
  std::vector<std::vector<moe::bf16_bits>> x(1, std::vector<moe::bf16_bits>(3 * H, 0));
  const auto out = moe::reference_forward(p, r, moe::build_layout(p, r), w, x);
  for (float v : out[0]) EXPECT_EQ(v, 0.0f);
  // gate = up = x_0 for every j: h_j = silu(x_0) * x_0; W2 = identity on the
  // first I columns: y_c = h_c (c < I), 0 beyond.
  std::fill(w.w1[0].begin(), w.w1[0].end(), 0);
  std::fill(w.w2[0].begin(), w.w2[0].end(), 0);
  for (int j = 0; j < I; ++j) {
    w.w1[0][j * H + 0] = moe::to_bf16(1.0f);        // gate_j = x_0
    w.w1[0][(I + j) * H + 0] = moe::to_bf16(1.0f);  // up_j = x_0
    w.w2[0][j * I + j] = moe::to_bf16(1.0f);        // y_j = h_j
  }
  for (int t = 0; t < 3; ++t) x[0][t * H] = moe::to_bf16(0.5f * (t + 1));
  const auto y = moe::reference_forward(p, r, moe::build_layout(p, r), w, x);
  for (int t = 0; t < 3; ++t) {
    const double g = 0.5 * (t + 1), h = moe::round_bf16(float(g / (1 + std::exp(-g)) * g));
    for (int c = 0; c < H; ++c) EXPECT_EQ(y[0][t * H + c], c < I ? moe::round_bf16(float(h)) : 0.0f) << t << " " << c;
  }
}

TEST(MoeBench, SweepCoversTheIssueGrid) {
  const auto s = moe::bench_sweep("standard");
  EXPECT_GE(s.size(), 84u);
  EXPECT_EQ(s.size(), 192u);  // 4 token counts x 4 (E, k) x 3 (hidden, I) x 2 EP x 2 routings
  std::set<std::tuple<int, int, int, int, int, int, std::string>> distinct;
  for (const auto& c : s) {
    EXPECT_NO_THROW(moe::validate(c.problem(), 4));
    distinct.insert({c.tokens_per_rank, c.experts, c.topk, c.hidden, c.intermediate, c.ep, c.routing});
  }
  EXPECT_EQ(distinct.size(), s.size());
  EXPECT_EQ(moe::bench_sweep("quick").size(), 8u);
  // The same configurations at EP = 8.
  const auto eight = moe::bench_sweep("eight");
  EXPECT_EQ(eight.size(), 96u);
  for (const auto& c : eight) {
    EXPECT_EQ(c.ep, 8);
    EXPECT_NO_THROW(moe::validate(c.problem(), 8));
  }
  // One GPU: the same configurations at EP = 1.
  const auto one = moe::bench_sweep("one");
  EXPECT_EQ(one.size(), 96u);
  for (std::size_t i = 0; i < one.size(); ++i) {
    EXPECT_EQ(one[i].ep, 1);
    EXPECT_EQ(one[i].tokens_per_rank, eight[i].tokens_per_rank);
    EXPECT_EQ(one[i].experts, eight[i].experts);
    EXPECT_NO_THROW(moe::validate(one[i].problem(), 1));
  }
  expect_error([] { moe::bench_sweep("huge"); }, "unknown sweep");
  // Another routing list makes the same grid with those routings.
  const auto balanced = moe::bench_sweep("one", {"balanced"});
  ASSERT_EQ(balanced.size(), one.size() / 2);
  for (std::size_t i = 0; i < balanced.size(); ++i) {
    EXPECT_EQ(balanced[i].routing, "balanced");
    EXPECT_EQ(balanced[i].tokens_per_rank, one[2 * i].tokens_per_rank);
    EXPECT_EQ(balanced[i].experts, one[2 * i].experts);
    EXPECT_TRUE(balanced[i].synthetic().balanced);
  }
}

// Grouped raster order: within each expert, groups of 16 m blocks, column by
// column, m fastest; the same items as the m-major order, and every scheduler's
// order over it still passes check_order.
// The `--sweep one` heatmap: shapes ascending down, tokens ascending across, uniform's two
// panels first; a wrong row, a row without the exact figure and a missing configuration
// are grey (NaN); multi-GPU rows are not drawn.
TEST(MoeBench, CublasHeatmapPlacesEachRowsRatios) {
  auto row = [](int e, int k, int tokens, const char* routing, double mean, double own, bool correct) {
    nlohmann::json r = {{"ep", 1}, {"experts", e}, {"topk", k}, {"hidden", 4096}, {"intermediate", 2048},
                        {"tokens_per_rank", tokens}, {"routing", routing}, {"fused_over_cublas", mean},
                        {"correct", correct}};
    if (own > 0) r["fused_over_cublas_exact"] = own;
    return r;
  };
  nlohmann::json results = {{"one_gpu_card", "H200"}, {"rows", nlohmann::json::array()}};
  auto& rows = results["rows"];
  rows.push_back(row(128, 6, 8192, "balanced", 0.9, 1.2, true));
  rows.push_back(row(128, 6, 512, "uniform", 1.01, 1.05, true));
  rows.push_back(row(64, 2, 8192, "uniform", 0.75, 0, true));
  rows.push_back(row(64, 2, 512, "uniform", 2.0, 2.0, false));
  rows.push_back({{"ep", 2}, {"experts", 32}, {"topk", 2}, {"hidden", 1}, {"intermediate", 1},
                  {"tokens_per_rank", 99}, {"routing", "uniform"}, {"fused_over_cublas", 5.0}});
  const auto h = moe::cublas_heatmap(results);
  EXPECT_NE(h.title.find("H200"), std::string::npos);
  EXPECT_EQ(h.columns, (std::vector<std::string>{"512", "8192"}));
  EXPECT_EQ(h.rows, (std::vector<std::string>{"E 64 k 2 4096x2048", "E 128 k 6 4096x2048"}));
  ASSERT_EQ(h.panels.size(), 4u);
  EXPECT_EQ(h.panels[0].title, "uniform, mean count");
  EXPECT_EQ(h.panels[1].title, "uniform, own counts");
  EXPECT_EQ(h.panels[2].title, "balanced, mean count");
  const auto& mean = h.panels[0].values;
  EXPECT_TRUE(std::isnan(mean[0][0]));  // the wrong row
  EXPECT_DOUBLE_EQ(mean[0][1], 0.75);
  EXPECT_DOUBLE_EQ(mean[1][0], 1.01);
  EXPECT_TRUE(std::isnan(mean[1][1]));  // not measured with uniform routing
  EXPECT_TRUE(std::isnan(h.panels[1].values[0][1]));  // no exact figure
  EXPECT_DOUBLE_EQ(h.panels[1].values[1][0], 1.05);
  EXPECT_DOUBLE_EQ(h.panels[3].values[1][1], 1.2);
  // One-line refusals.
  auto error_of = [](const nlohmann::json& j) {
    try {
      moe::cublas_heatmap(j);
    } catch (const common::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of({{"rows", nlohmann::json::array({rows[4]})}}).find("no EP = 1 rows"), std::string::npos);
  EXPECT_NE(error_of(nlohmann::json::array()).find("no \"rows\" array"), std::string::npos);
  nlohmann::json no_hidden = {{"rows", nlohmann::json::array({rows[0]})}};
  no_hidden["rows"][0].erase("hidden");
  EXPECT_EQ(error_of(no_hidden), "moe chart: an EP = 1 row has no \"hidden\"");
  nlohmann::json text_topk = {{"rows", nlohmann::json::array({rows[0]})}};
  text_topk["rows"][0]["topk"] = "six";
  EXPECT_NE(error_of(text_topk).find("a field of the wrong type"), std::string::npos) << error_of(text_topk);
}

TEST(MoeSchedule, TilesComeInGroupedRasterOrder) {
  EXPECT_EQ(xstage::raster_group(132, 1000, 1.0, 2.0), moe::kMoeRasterGroup);
  const moe::Problem p{2, 4096, 8, 2, 1024, 512};  // skewed: some experts have > 16 m blocks
  const auto r = moe::synthetic_routing(p, {.zipf = 1.5, .empty_experts = 1, .seed = 3});
  const auto L = moe::build_layout(p, r);
  const auto g = moe::build_tiles(p, L.ranks[0]);
  const auto m = moe::build_tiles(p, L.ranks[0], 1);
  EXPECT_EQ(g.raster_group, moe::kMoeRasterGroup);
  ASSERT_EQ(g.l1.size(), m.l1.size());
  ASSERT_EQ(g.l2.size(), m.l2.size());
  auto key = [](const moe::WorkItem& w) { return std::tuple(w.expert, w.m_block, w.n_block); };
  for (auto* v : {&g.l1, &g.l2}) {
    std::set<std::tuple<int, int, int>> seen;
    for (const auto& w : *v) EXPECT_TRUE(seen.insert(key(w)).second);
  }
  int big = 0;
  for (int e = 0; e < g.experts; ++e) big = std::max(big, g.m_blocks[e]);
  ASSERT_GT(big, moe::kMoeRasterGroup) << "the case should have an expert with more than one group";
  // m-major: n fastest. Grouped: m fastest within a group, group by group.
  for (std::size_t i = 1; i < m.l1.size(); ++i)
    if (m.l1[i].expert == m.l1[i - 1].expert && m.l1[i].m_block == m.l1[i - 1].m_block)
      EXPECT_EQ(m.l1[i].n_block, m.l1[i - 1].n_block + 1);
  std::size_t i = 0;
  for (int e = 0; e < g.experts; ++e)
    for (int m0 = 0; m0 < g.m_blocks[e]; m0 += moe::kMoeRasterGroup)
      for (int n = 0; n < g.l1_n_blocks; ++n)
        for (int mb = m0; mb < std::min(g.m_blocks[e], m0 + moe::kMoeRasterGroup); ++mb, ++i) {
          ASSERT_LT(i, g.l1.size());
          EXPECT_EQ(key(g.l1[i]), std::tuple(e, mb, n));
        }
  EXPECT_EQ(i, g.l1.size());
  const int wave = moe::occupancy_wave_experts(g, 132);
  EXPECT_NO_THROW(moe::check_order(g, moe::ExpertWaveScheduler(wave).order(g)));
  EXPECT_NO_THROW(moe::check_order(g, moe::InterleavedScheduler(wave, 2, 3).order(g)));
  expect_error([&] { moe::build_tiles(p, L.ranks[0], 0); }, "raster_group");
}

TEST(MoeFusedPlan, TensorMapShapes) {
  const auto p = small(2, 40, 8, 2, 512, 384);
  const auto m = moe::fused_maps(p, 300);
  EXPECT_EQ(m.recv.rows, 300);
  EXPECT_EQ(m.recv.cols, 512);
  EXPECT_EQ(m.h.rows, 300);
  EXPECT_EQ(m.h.cols, 384);
  EXPECT_EQ(m.w1.rows, 4 * 2 * 384);  // E/P experts, gate and up
  EXPECT_EQ(m.w1.cols, 512);
  EXPECT_EQ(m.w2.rows, 4 * 512);
  EXPECT_EQ(m.w2.cols, 384);
  expect_error([&] { moe::fused_maps(p, 0); }, "max_rows must be >= 1");
  // The smem plan fits and keeps the swizzle alignment.
  using K = moe::FusedKernelShape;
  EXPECT_LE(K::kSmemBytes, 227 * 1024);
  EXPECT_EQ(K::kOffStaging % 1024, 0);
  EXPECT_EQ(K::kStageBytes, 3 * 128 * 64 * 2);
}

// Every tile's TMA boxes lie inside its expert's weights; gate and up of an L1
// tile are I rows apart; the L2 tiles of an expert cover its W2 rows exactly once;
// A rows start at the tile's first recv row.
TEST(MoeFusedPlan, TileLoadsStayInsideTheirExpert) {
  const auto p = small(2, 300, 8, 3, 512, 384);
  const auto r = moe::synthetic_routing(p, {.zipf = 1.0, .empty_experts = 1, .seed = 5});
  const auto L = moe::build_layout(p, r);
  for (const auto& R : L.ranks) {
    const auto t = moe::build_tiles(p, R);
    const auto maps = moe::fused_maps(p, L.max_rows());
    std::vector<int> w2_rows(maps.w2.rows, 0), w1_rows(maps.w1.rows, 0);
    for (const auto& it : t.l1) {
      const auto ld = moe::tile_loads(it, R.expert_offset[it.expert], p.hidden, p.intermediate);
      EXPECT_EQ(ld.a_row, R.expert_offset[it.expert] + it.m_block * moe::kTileM);
      EXPECT_LT(ld.a_row, R.expert_offset[it.expert + 1]);  // at least one valid row
      EXPECT_EQ(ld.b1_row - ld.b0_row, p.intermediate);
      EXPECT_GE(ld.b0_row, it.expert * 2 * p.intermediate);
      EXPECT_LE(ld.b1_row + moe::kBoxRows, (it.expert + 1) * 2 * p.intermediate);
      EXPECT_EQ(ld.k_steps * moe::kTileK, p.hidden);
      if (it.m_block == 0)
        for (int i = 0; i < moe::kBoxRows; ++i) ++w1_rows[ld.b0_row + i], ++w1_rows[ld.b1_row + i];
    }
    for (const auto& it : t.l2) {
      const auto ld = moe::tile_loads(it, R.expert_offset[it.expert], p.hidden, p.intermediate);
      EXPECT_EQ(ld.b1_row - ld.b0_row, moe::kBoxRows);
      EXPECT_EQ(ld.k_steps * moe::kTileK, p.intermediate);
      if (it.m_block == 0)
        for (int i = 0; i < moe::kL2TileN; ++i) ++w2_rows[ld.b0_row + i];
    }
    for (int e = 0; e < t.experts; ++e) {
      const int want = t.m_blocks[e] > 0 ? 1 : 0;
      for (int i = 0; i < 2 * p.intermediate; ++i) EXPECT_EQ(w1_rows[e * 2 * p.intermediate + i], want) << e << " " << i;
      for (int i = 0; i < p.hidden; ++i) EXPECT_EQ(w2_rows[e * p.hidden + i], want) << e << " " << i;
    }
  }
}

// The profile's shares from summed cycles: a CTA that never ran a role is left out,
// each warpgroup's phases are shares of its own total, the producer's of its own, the
// start is what the phases leave, and total_us converts at the given clock.
TEST(MoeFusedPlan, ProfileSharesFromCycleSums) {
  using C = moe::ConsumerPhase;
  using P = moe::ProducerPhase;
  const int blocks = 2, launches = 2;
  std::vector<unsigned long long> sums(std::size_t(blocks) * moe::kProfileRoles * moe::kProfileFields, 0);
  auto set = [&](int b, int role, auto f, unsigned long long v) {
    sums[(std::size_t(b) * moe::kProfileRoles + role) * moe::kProfileFields + static_cast<int>(f)] = v;
  };
  // Block 0: both warpgroups; block 1: warpgroup 0 only (warpgroup 1 never ran).
  for (int role : {1, 2}) {
    set(0, role, C::total, 1000);
    set(0, role, C::item, 100);
    set(0, role, C::mainloop, 600);
    set(0, role, C::stage, 150);
    set(0, role, C::epilogue, 200);
    set(0, role, C::combine_wait, 20);
    set(0, role, C::combine, 30);
    set(0, role, C::items, 8);
  }
  set(1, 1, C::total, 2000);
  set(1, 1, C::mainloop, 1800);
  set(1, 1, C::epilogue, 200);
  set(1, 1, C::items, 4);
  for (int b = 0; b < blocks; ++b) {
    set(b, 0, P::total, 1000);
    set(b, 0, P::ring, 500);
    set(b, 0, P::dependency, b == 0 ? 100 : 300);
  }
  const moe::KernelProfile pf = moe::summarize_profile(sums, blocks, launches, 1000000);  // 1 GHz: 1000 cycles per us
  EXPECT_EQ(pf.launches, launches);
  EXPECT_NEAR(pf.mainloop, (0.6 + 0.6 + 0.9) / 3, 1e-12);
  EXPECT_NEAR(pf.epilogue, (0.2 + 0.2 + 0.1) / 3, 1e-12);
  EXPECT_NEAR(pf.item_wait, (0.1 + 0.1 + 0.0) / 3, 1e-12);
  EXPECT_NEAR(pf.stage_wait, (0.15 + 0.15) / 3, 1e-12);
  EXPECT_NEAR(pf.start, (0.05 + 0.05 + 0.0) / 3, 1e-12);
  EXPECT_NEAR(pf.start + pf.item_wait + pf.mainloop + pf.epilogue + pf.combine_wait + pf.combine, 1.0, 1e-12);
  EXPECT_NEAR(pf.producer_ring, 0.5, 1e-12);
  EXPECT_NEAR(pf.producer_dependency, 0.2, 1e-12);
  EXPECT_NEAR(pf.items_per_warpgroup, (8 + 8 + 4) / 3.0 / launches, 1e-12);
  EXPECT_NEAR(pf.total_us, (1000 + 1000 + 2000) / 3.0 / launches / 1000.0, 1e-12);  // cycles / (cycles per us)
  EXPECT_EQ(moe::summarize_profile(sums, blocks, launches, 0).total_us, 0.0);
  // Wrong sizes and empty sums are refused.
  EXPECT_THROW(moe::summarize_profile(sums, blocks + 1, launches, 1000), std::exception);
  EXPECT_THROW(moe::summarize_profile(std::vector<unsigned long long>(sums.size(), 0), blocks, launches, 1000),
               std::exception);
}

// The drain's forward by hand: experts leave in the order their L2 tiles end, in groups,
// each after the link is free, one stream's fixed costs (its waits and merged copies) plus
// all P ranks' bytes at the copy rate; the flags' write after the last; then the reads
// back at D.
TEST(MoeHostLink, DrainPredictionByHand) {
  bg::ModelParams link;
  link.drain_GBps = 61;
  const bg::CopyCosts copy{1e-3, 100};  // 1 us per stream operation, 100 GB/s
  const double row = 1e4;               // bytes: 100 rows are 1 MB, 10 us at 100 GB/s
  // Two ranks. Expert 1 ends first (10 us): 10 + 2 x (2 ops x 1 us + 10 us) = 34; expert 0
  // (30 us): max(34, 30) + 2 x (2 + 20) = 78. The flags: 2 x 2 writes, 82.
  // Expert 0's rows follow expert 1's in the stage and in the return rows.
  const std::vector<moe::DrainExpertCost> experts{{30, {{100, 1, 100, 200}}}, {10, {{0, 1, 0, 100}}}};
  EXPECT_NEAR(moe::predict_drain_us(50, experts, 1, row, 2, 0, copy, 0, link), 82, 1e-9);
  EXPECT_NEAR(moe::predict_drain_us(100, experts, 1, row, 2, 0, copy, 0, link), 100, 1e-9);  // compute-bound
  EXPECT_NEAR(moe::predict_drain_us(100, experts, 1, row, 2, 61e3, copy, 0, link), 101, 1e-9);  // + 61 kB at D
  // Read back at the SMs' read rate where one is given: 61 kB at 30.5 GB/s, 2 us.
  EXPECT_NEAR(moe::predict_drain_us(100, experts, 1, row, 2, 61e3, copy, 30.5, link), 102, 1e-9);
  // Both in one group: after 30 us, 2 waits and one merged copy of 3 MB: 30 + 2 x (3 + 30)
  // = 96, and the flags 100. Not merged (a gap in the return rows): one more op, 102.
  EXPECT_NEAR(moe::predict_drain_us(50, experts, 2, row, 2, 0, copy, 0, link), 100, 1e-9);
  const std::vector<moe::DrainExpertCost> apart{{30, {{100, 1, 101, 200}}}, {10, {{0, 1, 0, 100}}}};
  EXPECT_NEAR(moe::predict_drain_us(50, apart, 2, row, 2, 0, copy, 0, link), 102, 1e-9);
  // No measured rate: the link fit's D (61 kB, 1 us); no copy-engine op costs.
  EXPECT_NEAR(moe::predict_drain_us(0, {{0, {{0, 1, 0, 1}}}}, 1, 61e3, 1, 0, {0, 0}, 0, link), 1, 1e-9);
  EXPECT_THROW(moe::predict_drain_us(0, experts, 0, row, 2, 0, copy, 0, link), std::exception);
}

// The predicted side of `bench moe --link host`: each order's forward with SM stores is
// compute + stall + the combine's reads back, each order's compute its ticket simulation
// on rank 0's SMs / P; both orders with the drain are predicted too, and the advisor takes
// Interleaved's drain where it beats Expert-Wave's by more than kDrainOrderMargin (else
// Expert-Wave's), where that beats the faster order with SM stores by more than
// kDrainMargin; otherwise Interleaved with SM stores where predicted faster by more than
// kSmOrderMargin, else Expert-Wave itself.
// Interleaved's split is the least-stall one for rank 0's own bursts; widened to all P
// ranks' it can stall more than Expert-Wave (its gaps do not drain a P-fold burst), so no
// order is asserted here.
TEST(MoeHostLink, PredictionsOnTheHostFit) {
  const char* src = std::getenv("XSTAGE_SOURCE_DIR");
  ASSERT_NE(src, nullptr) << "run through ctest (XSTAGE_SOURCE_DIR)";
  const auto host = bg::read_params(std::string(src) + "/xstage/data/h200_host_params.json").find("host", "st16");
  int stalled = 0;
  int drained = 0;
  int kept = 0;
  for (const auto& c : moe::select_rows("standard", {.tokens = {128, 2048}, .routing = {"uniform"}})) {
    moe::HostLinkRow r;
    r.config = c;
    r.copy = moe::kH200CopyCosts;
  r.read_GBps = moe::kH200HostReadGBps;
    r.read_GBps = moe::kH200HostReadGBps;
    moe::predict_host_link_row(r, host, 132);
    drained += r.drained();
    // The drain's grouping: a power of two or all of one rank's experts.
    const int epr = c.experts / c.ep, g = r.drain_experts_per_copy;
    EXPECT_TRUE(g >= 1 && g <= epr && (g == epr || (g & (g - 1)) == 0)) << g;
    EXPECT_GT(r.predicted_compute_us, 0);
    EXPECT_GT(r.predicted_compute_interleaved_us, 0);
    // The stage holds the mainloops' reads while it drains: each order pays the combine's
    // bytes at the drain rate.
    const double blocked_us = double(c.ep) * c.tokens_per_rank * c.topk * c.hidden * 2 / host.drain_GBps * 1e-3;
    EXPECT_NEAR(r.predicted_stall_expert_wave_us, blocked_us, 1e-9);
    EXPECT_NEAR(r.predicted_stall_interleaved_us, blocked_us, 1e-9);
    // Either order with SM stores also reads every combine row back over the link.
    EXPECT_NEAR(r.predicted_expert_wave_us, r.predicted_compute_us + r.predicted_stall_expert_wave_us + blocked_us,
                1e-9);
    EXPECT_NEAR(r.predicted_interleaved_us,
                r.predicted_compute_interleaved_us + r.predicted_stall_interleaved_us + blocked_us, 1e-9);
    // The drain reads back only the other ranks' rows, and ends no earlier than its
    // order's compute.
    EXPECT_GE(r.predicted_drain_us, r.predicted_compute_interleaved_us);
    EXPECT_GE(r.predicted_drain_expert_wave_us, r.predicted_compute_us);
    const bool il_order = r.predicted_drain_us < (1 - moe::kDrainOrderMargin) * r.predicted_drain_expert_wave_us;
    const double drain_us = il_order ? r.predicted_drain_us : r.predicted_drain_expert_wave_us;
    const bool il_stores = r.predicted_interleaved_us < (1 - moe::kSmOrderMargin) * r.predicted_expert_wave_us;
    const double stores_us = std::min(r.predicted_interleaved_us, r.predicted_expert_wave_us);
    const bool drain = drain_us < (1 - moe::kDrainMargin) * stores_us;
    EXPECT_EQ(r.schedule, drain ? (il_order ? "drain" : "drain_expert_wave") : il_stores ? "sm_stores" : "expert_wave");
    const double advised_us = drain ? drain_us : il_stores ? r.predicted_interleaved_us : r.predicted_expert_wave_us;
    EXPECT_NEAR(r.predicted_speedup, r.predicted_expert_wave_us / advised_us, 1e-12);
    kept += r.schedule == "expert_wave";
    EXPECT_EQ(r.interleaved.kind, moe::ScheduleKind::interleaved);
    stalled += r.predicted_stall_expert_wave_us > 0;
  }
  // The host link drains ~55 GB/s: most of these layers' combine stores back it up, and
  // the copy engine hides them at 2048 tokens.
  EXPECT_GT(stalled, 0);
  EXPECT_GT(drained, 0);
  // At 128 tokens the orders' compute is predicted equal: Expert-Wave stays in some rows.
  EXPECT_GT(kept, 0);
}

namespace {
// One configuration's predicted host-link row on the shipped host fit, 132 SMs and the
// H200's copy-engine costs and read rate.
moe::HostLinkRow predict_on_host_fit(const moe::BenchConfig& c) {
  const char* src = std::getenv("XSTAGE_SOURCE_DIR");
  XS_ASSERT(src != nullptr, "run through ctest (XSTAGE_SOURCE_DIR)");
  const auto host = bg::read_params(std::string(src) + "/xstage/data/h200_host_params.json").find("host", "st16");
  moe::HostLinkRow r;
  r.config = c;
  r.copy = moe::kH200CopyCosts;
  r.read_GBps = moe::kH200HostReadGBps;
  moe::predict_host_link_row(r, host, 132);
  return r;
}
}  // namespace

// With the drain the order decides when each expert's rows leave. At P = 8 (16 SMs a
// rank, a wave of one or two experts) Interleaved's lag holds the last waves' rows back
// and the Expert-Wave drain is predicted faster (measured 0.93x at this shape, 8192
// tokens); at P = 2 the Interleaved one (measured 1.06x the other way). Where the
// Interleaved drain is predicted faster by less than the model's error on the ratio
// (kDrainOrderMargin), the drain goes in Expert-Wave's order.
TEST(MoeHostLink, DrainOrderFollowsThePredictedTime) {
  auto predict = [](int ep, int tokens) {
    return predict_on_host_fit(
        {.tokens_per_rank = tokens, .experts = 64, .topk = 2, .hidden = 7168, .intermediate = 3072, .ep = ep});
  };
  const moe::HostLinkRow eight = predict(8, 8192), two = predict(2, 8192), close = predict(2, 512);
  EXPECT_LT(eight.predicted_drain_expert_wave_us, eight.predicted_drain_us);
  EXPECT_EQ(eight.schedule, "drain_expert_wave");
  EXPECT_DOUBLE_EQ(eight.predicted_advised_us(), eight.predicted_drain_expert_wave_us);
  EXPECT_LT(two.predicted_drain_us, (1 - moe::kDrainOrderMargin) * two.predicted_drain_expert_wave_us);
  EXPECT_EQ(two.schedule, "drain");
  EXPECT_DOUBLE_EQ(two.predicted_advised_us(), two.predicted_drain_us);
  EXPECT_LT(close.predicted_drain_us, close.predicted_drain_expert_wave_us);
  EXPECT_GE(close.predicted_drain_us, (1 - moe::kDrainOrderMargin) * close.predicted_drain_expert_wave_us);
  EXPECT_EQ(close.schedule, "drain_expert_wave");
  EXPECT_DOUBLE_EQ(close.predicted_advised_us(), close.predicted_drain_expert_wave_us);
  // The bench takes the advised schedule's time from the four it measured.
  moe::HostLinkRow m = eight;
  m.interleaved_us = 1, m.interleaved_drain_us = 2, m.expert_wave_drain_us = 3;
  EXPECT_EQ(m.measured_advised_us(), 3);
  m.schedule = "drain";
  EXPECT_EQ(m.measured_advised_us(), 2);
  m.schedule = "sm_stores";
  EXPECT_EQ(m.measured_advised_us(), 1);
  m.schedule = "expert_wave";
  m.expert_wave_us = 4;
  EXPECT_EQ(m.measured_advised_us(), 4);
  EXPECT_FALSE(m.drained());
  EXPECT_DOUBLE_EQ(m.predicted_advised_us(), m.predicted_expert_wave_us);
}

// Interleaved with SM stores needs a predicted gain above kSmOrderMargin. At P = 8 and 512
// tokens, E 64, k 2, 3072 x 8192 is predicted about 4 % faster with it (measured 0.976 and
// 0.990 of Expert-Wave): Expert-Wave is kept; at P = 4 with skewed routing the same shape
// is predicted about 6 % faster: Interleaved is taken.
TEST(MoeHostLink, SmStoreOrderNeedsMoreThanTheMargin) {
  auto predict = [](int ep, const char* routing) {
    return predict_on_host_fit({.tokens_per_rank = 512, .experts = 64, .topk = 2, .hidden = 3072,
                                .intermediate = 8192, .ep = ep, .routing = routing});
  };
  const moe::HostLinkRow close = predict(8, "uniform"), clear = predict(4, "skewed");
  for (const moe::HostLinkRow* r : {&close, &clear}) EXPECT_FALSE(r->drained()) << r->schedule;
  EXPECT_LT(close.predicted_interleaved_us, 0.97 * close.predicted_expert_wave_us);
  EXPECT_GE(close.predicted_interleaved_us, (1 - moe::kSmOrderMargin) * close.predicted_expert_wave_us);
  EXPECT_EQ(close.schedule, "expert_wave");
  EXPECT_DOUBLE_EQ(close.predicted_speedup, 1.0);
  EXPECT_LT(clear.predicted_interleaved_us, (1 - moe::kSmOrderMargin) * clear.predicted_expert_wave_us);
  EXPECT_EQ(clear.schedule, "sm_stores");
  EXPECT_DOUBLE_EQ(clear.predicted_speedup, clear.predicted_expert_wave_us / clear.predicted_interleaved_us);
}

// The model check: measured Expert-Wave time over the row's own prediction of its forward
// and over predict_host_link_row's for its configuration (on the row's SM count, else the
// one given); rows not correct are left out.
TEST(MoeHostLink, ModelCheckComparesMeasuredTimesWithBothPredictions) {
  const char* src = std::getenv("XSTAGE_SOURCE_DIR");
  ASSERT_NE(src, nullptr) << "run through ctest (XSTAGE_SOURCE_DIR)";
  const auto host = bg::read_params(std::string(src) + "/xstage/data/h200_host_params.json").find("host", "st16");
  std::vector<moe::HostLinkRow> rows(3);
  for (int i = 0; i < 3; ++i) {
    rows[i].config = {.tokens_per_rank = 512, .experts = 64, .topk = 2, .hidden = 4096, .intermediate = 2048, .ep = 2};
    rows[i].predicted_expert_wave_us = 100;
    rows[i].expert_wave_us = 100.0 * (i + 1);
    rows[i].correct = i < 2;
  }
  const moe::ModelCheck c = moe::check_expert_wave_predictions(rows, host, 132);
  EXPECT_EQ(c.at_measurement.n, 2u);
  EXPECT_DOUBLE_EQ(c.at_measurement.min, 1.0);
  EXPECT_DOUBLE_EQ(c.at_measurement.max, 2.0);
  moe::HostLinkRow r;
  r.config = rows[0].config;
  moe::predict_host_link_row(r, host, 132);
  const double predicted = r.predicted_expert_wave_us;
  EXPECT_NEAR(c.current.min, 100.0 / predicted, 1e-12);
  EXPECT_NEAR(c.current.max, 200.0 / predicted, 1e-12);
  // A row's own SM count is used; with none and no fallback the check refuses the row.
  rows.resize(1);
  rows[0].sms = 66;
  moe::HostLinkRow half;
  half.config = rows[0].config;
  moe::predict_host_link_row(half, host, 66);
  ASSERT_NE(half.predicted_expert_wave_us, predicted);
  EXPECT_NEAR(moe::check_expert_wave_predictions(rows, host, 0).current.min, 100.0 / half.predicted_expert_wave_us,
              1e-12);
  rows[0].sms = 0;
  EXPECT_THROW(moe::check_expert_wave_predictions(rows, host, 0), std::exception);
}

// The sweep's summary: rows not correct are left out; "a stall is predicted" means more
// than 1 % of the compute; the error is |predicted - measured| / measured, median.
TEST(MoeHostLink, SummaryCountsCheckedRowsAndPredictedStalls) {
  auto row = [](double speedup, double predicted, double stall_ew, bool correct) {
    moe::HostLinkRow r;
    r.speedup = speedup, r.predicted_speedup = predicted, r.correct = correct;
    r.predicted_compute_us = 100, r.predicted_stall_expert_wave_us = stall_ew;
    return r;
  };
  const auto s = moe::host_link_summary({row(2.0, 2.0, 50, true), row(0.5, 1.0, 1.0, true), row(8.0, 1.0, 50, true),
                                         row(100.0, 1.0, 50, false)});
  EXPECT_EQ(s["rows_where_win_predicted"].get<int>(), 1);  // predicted 2.0, measured 2.0
  EXPECT_DOUBLE_EQ(s["predicted_geomean_where_win_predicted"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(s["geomean_where_win_predicted"].get<double>(), 2.0);
  EXPECT_EQ(s["rows_where_stall_predicted"].get<int>(), 2);  // 1 us of 100 is no stall
  EXPECT_DOUBLE_EQ(s["geomean_where_stall_predicted"].get<double>(), 4.0);
  EXPECT_DOUBLE_EQ(s["max_speedup"].get<double>(), 8.0);
  EXPECT_DOUBLE_EQ(s["min_speedup"].get<double>(), 0.5);
  EXPECT_EQ(s["rows_losing_more_than_3_percent"].get<int>(), 1);  // 0.5; the failed row is not counted
  EXPECT_DOUBLE_EQ(s["geomean_by_ep"]["2"].get<double>(), 2.0);   // the rows' default EP, cbrt(2 * 0.5 * 8)
  EXPECT_DOUBLE_EQ(s["speedup_prediction_median_abs_rel_error"].get<double>(), 0.875);  // of 0, 1, 0.875
  // Combine bytes per second of the Expert-Wave forward: P * T * k * hidden * 2 bytes.
  moe::HostLinkRow c = row(1.0, 1.0, 0, true);
  c.config = {.tokens_per_rank = 1000, .experts = 64, .topk = 2, .hidden = 4096, .intermediate = 2048, .ep = 4};
  c.expert_wave_us = 1000;  // 4 * 1000 * 2 * 4096 * 2 B = 65.536 MB in 1 ms
  EXPECT_DOUBLE_EQ(moe::host_link_combine_bytes(c.config), 65.536e6);
  EXPECT_NEAR(moe::host_link_summary({c})["combine_GBps_median"].get<double>(), 65.536, 1e-9);
  // With Expert-Wave measured in HBM: the hiding bound (over the link / in HBM) and the
  // HBM forward over the predicted compute; rows without it count in neither.
  EXPECT_TRUE(moe::host_link_summary({c})["hiding_bound_geomean"].is_null());
  moe::HostLinkRow h = c;
  h.expert_wave_hbm_us = 500, h.predicted_compute_us = 400;
  const auto with_hbm = moe::host_link_summary({c, h});
  EXPECT_DOUBLE_EQ(with_hbm["hiding_bound_geomean"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(with_hbm["hbm_over_predicted_compute_median"].get<double>(), 1.25);
  // With Interleaved in HBM too: the orders' measured ratio there, and the simulation's
  // error on it (predicted 400 / 380, measured 500 / 450).
  EXPECT_TRUE(with_hbm["hbm_interleaved_over_expert_wave_geomean"].is_null());
  moe::HostLinkRow both = h;
  both.interleaved_hbm_us = 450, both.predicted_compute_interleaved_us = 380;
  const auto orders = moe::host_link_summary({c, both});
  EXPECT_DOUBLE_EQ(orders["hbm_interleaved_over_expert_wave_geomean"].get<double>(), 500.0 / 450.0);
  EXPECT_NEAR(orders["hbm_order_prediction_median_abs_rel_error"].get<double>(),
              std::abs((400.0 / 380.0) / (500.0 / 450.0) - 1), 1e-12);
  const auto none = moe::host_link_summary({row(1.0, 1.0, 0, false)});
  EXPECT_TRUE(none["geomean_where_stall_predicted"].is_null());
  EXPECT_TRUE(none["speedup_prediction_median_abs_rel_error"].is_null());
}

