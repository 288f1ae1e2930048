// CPU tests of the Ulysses layer's host logic: the slice-interleaved tile
// order, validation messages, the two All-to-All plans (run on host buffers),
// the fused epilogue's target arithmetic against the serial plan, the
// advisor-chosen schedule, and the whole-layer reference against attention on
// the gathered sequence.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include <fmt/format.h>

#include "common/testing.hpp"
#include "xstage/ulysses.hpp"

using namespace xstage;
using namespace xstage::ulysses;
using common::error_of;

namespace {

// A value that names its global position (b, s, h, d) of the full [B, S, H, D] tensor.
double code(int64_t b, int64_t s, int64_t h, int64_t d) { return ((b * 100000 + s) * 1000 + h) * 1000 + d; }

constexpr std::size_t kBufs = 5;

burstgap::ModelParams h200_like() {
  burstgap::ModelParams m;  // the fitted peer/st16 x2 figures of docs/xstage-burstgap.md
  m.t0_ns_per_byte = 0.0198;
  m.issue_latency_ns = 176;
  m.drain_GBps = 419;
  m.capacity_bytes_gpu = 11.2e6;
  m.capacity_bytes_per_sm = 113824;
  m.capacity_scope = burstgap::CapacityScope::both;
  return m;
}

}  // namespace

TEST(UlyssesTileOrder, SliceInterleavedIsAPermutationWithLocalLast) {
  for (int slices : {1, 2, 4}) {
    for (int per_slice : {1, 2, 4, 8}) {
      for (int run = 1; run <= per_slice; run *= 2) {
        for (int first = 0; first < slices; ++first) {
          attention::TileSpace sp;
          sp.m_blocks = slices * per_slice;
          sp.heads = 3;
          sp.batches = 2;
          sp.order = attention::TileOrder::slice_interleaved;
          sp.slices = slices;
          sp.slice_first = first;
          sp.slice_run = run;
          std::set<std::tuple<int, int, int>> seen;
          for (int64_t i = 0; i < sp.count(); ++i) {
            const auto w = sp.tile(i);
            ASSERT_TRUE(w.valid);
            ASSERT_TRUE(seen.insert({w.batch, w.head, w.m_block}).second) << "tile twice at " << i;
            ASSERT_GE(w.m_block, 0);
            ASSERT_LT(w.m_block, sp.m_blocks);
            // Head-major outside the m-blocks.
            EXPECT_EQ(w.head, (i / sp.m_blocks) % 3);
            const int pos = static_cast<int>(i % sp.m_blocks), group = slices * run;
            const int slice = w.m_block / per_slice;
            EXPECT_EQ(slice, (first + (pos % group) / run) % slices) << "position " << pos;
            // The last run of each group is slice first - 1 (the local one when first = rank + 1).
            if (pos % group >= group - run) EXPECT_EQ(slice, (first + slices - 1) % slices);
          }
          EXPECT_EQ(int64_t(seen.size()), sp.count());
          EXPECT_FALSE(sp.tile(sp.count()).valid);
        }
      }
    }
  }
}

TEST(UlyssesValidate, RefusesWithClearMessages) {
  Problem p;
  EXPECT_EQ(error_of([&] { validate(p, 2); }), "");
  EXPECT_NE(error_of([&] { validate({4, 1, 4096, 24, 128}, 2); }).find("P = 4 ranks needs 4 GPUs, but only 2 are visible"),
            std::string::npos);
  EXPECT_NE(error_of([&] { validate({4, 1, 4096, 30, 128}); }).find("H = 30 heads do not split over P = 4"),
            std::string::npos);
  EXPECT_NE(error_of([&] { validate({3, 1, 4096, 24, 128}); }).find("S = 4096 rows do not split over P = 3"),
            std::string::npos);
  EXPECT_NE(error_of([&] { validate({2, 1, 4000, 24, 128}); }).find("S/P = 2000 rows per rank must be a multiple of the 128-row"),
            std::string::npos);
  EXPECT_NE(error_of([&] { validate({2, 1, 4096, 24, 96}); }).find("head dim D = 96 is not supported"),
            std::string::npos);
  EXPECT_NE(error_of([&] { validate({16, 1, 4096, 32, 128}); }).find("P = 16 ranks is not supported"),
            std::string::npos);
  EXPECT_NE(error_of([&] { validate({2, 0, 4096, 24, 128}); }).find("empty shape"), std::string::npos);
}

TEST(UlyssesLayout, RanksOwnSlicesAndHeadRanges) {
  const Problem p{4, 1, 1024, 24, 64};
  for (int r = 0; r < 4; ++r) {
    const auto l = rank_layout(p, r);
    EXPECT_EQ(l.row0, r * 256);
    EXPECT_EQ(l.rows, 256);
    EXPECT_EQ(l.head0, r * 6);
    EXPECT_EQ(l.heads, 6);
    EXPECT_EQ(owner_of_row(p, l.row0), r);
    EXPECT_EQ(owner_of_row(p, l.row0 + l.rows - 1), r);
    EXPECT_EQ(coarse_chunk_owner(p, r, 3), r);  // local last
    std::set<int> owners;
    for (int k = 0; k < 4; ++k) owners.insert(coarse_chunk_owner(p, r, k));
    EXPECT_EQ(owners.size(), 4u);
  }
  EXPECT_NE(error_of([&] { owner_of_row(p, 1024); }), "");
}

class UlyssesPlans : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(UlyssesPlans, PreAttentionGathersAllRowsOfOwnHeads) {
  const auto [P, B] = GetParam();
  const Problem p{P, B, 128 * P * 2, 2 * P, 64};
  const int64_t R = p.rows_per_rank(), H = p.heads, Hp = p.heads_per_rank(), D = p.head_dim, S = p.seq;
  std::vector<ExchangePlan> plans;
  std::vector<std::vector<std::vector<double>>> bufs(P, std::vector<std::vector<double>>(kBufs));
  for (int r = 0; r < P; ++r) {
    plans.push_back(pre_attention_plan(p, r));
    auto& in = bufs[r][size_t(Buf::input)];
    in.resize(B * R * H * D);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < R; ++s)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t d = 0; d < D; ++d) in[((b * R + s) * H + h) * D + d] = code(b, r * R + s, h, d);
    bufs[r][size_t(Buf::send)].assign(plans[r].send_elems, NAN);
    bufs[r][size_t(Buf::recv)].assign(plans[r].recv_elems, NAN);
    bufs[r][size_t(Buf::attn)].assign(B * S * Hp * D, NAN);
    if (B == 1) EXPECT_TRUE(plans[r].after.empty()) << "B = 1 receives in place";
  }
  run_plans_on_host(plans, bufs);
  for (int r = 0; r < P; ++r) {
    const auto& a = bufs[r][size_t(Buf::attn)];
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t h = 0; h < Hp; ++h)
          for (int64_t d = 0; d < D; d += 7)
            ASSERT_EQ(a[((b * S + s) * Hp + h) * D + d], code(b, s, r * Hp + h, d))
                << "rank " << r << " b " << b << " s " << s << " h " << h;
  }
}

TEST_P(UlyssesPlans, PostAttentionAndFusedTargetsAgree) {
  const auto [P, B] = GetParam();
  const Problem p{P, B, 128 * P * 2, 2 * P, 64};
  const int64_t R = p.rows_per_rank(), H = p.heads, Hp = p.heads_per_rank(), D = p.head_dim, S = p.seq;
  std::vector<ExchangePlan> plans;
  std::vector<std::vector<std::vector<double>>> bufs(P, std::vector<std::vector<double>>(kBufs));
  for (int r = 0; r < P; ++r) {
    plans.push_back(post_attention_plan(p, r));
    auto& a = bufs[r][size_t(Buf::attn)];
    a.resize(B * S * Hp * D);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t h = 0; h < Hp; ++h)
          for (int64_t d = 0; d < D; ++d) a[((b * S + s) * Hp + h) * D + d] = code(b, s, r * Hp + h, d);
    bufs[r][size_t(Buf::send)].assign(plans[r].send_elems, NAN);
    bufs[r][size_t(Buf::recv)].assign(plans[r].recv_elems, NAN);
    bufs[r][size_t(Buf::output)].assign(B * R * H * D, NAN);
    if (B == 1) EXPECT_EQ(plans[r].send_elems, 0) << "B = 1 sends without packing";
  }
  run_plans_on_host(plans, bufs);
  for (int j = 0; j < P; ++j) {
    const auto& o = bufs[j][size_t(Buf::output)];
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < R; ++s)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t d = 0; d < D; d += 5)
            ASSERT_EQ(o[((b * R + s) * H + h) * D + d], code(b, j * R + s, h, d)) << "rank " << j;
  }
  // The fused epilogue's target of every 64-row slice is where the serial path puts those rows.
  for (int r = 0; r < P; ++r) {
    const FusedGeometry g = fused_geometry(p, r);
    for (int64_t b = 0; b < B; ++b)
      for (int h = 0; h < Hp; ++h)
        for (int row0 = 0; row0 < S; row0 += 64) {
          const FusedTarget t = fused_target(g, int(b), h, row0);
          ASSERT_EQ(t.owner, owner_of_row(p, row0));
          for (int rr : {0, 63}) {
            const int64_t off = t.offset + rr * g.stride_s;
            ASSERT_EQ(bufs[t.owner][size_t(Buf::output)][off], code(b, row0 + rr, r * Hp + h, 0))
                << "rank " << r << " head " << h << " row " << row0 + rr;
          }
        }
  }
}

INSTANTIATE_TEST_SUITE_P(RanksAndBatches, UlyssesPlans,
                         ::testing::Values(std::tuple{1, 1}, std::tuple{2, 1}, std::tuple{2, 2}, std::tuple{4, 1},
                                           std::tuple{4, 3}, std::tuple{8, 1}, std::tuple{8, 2}));

TEST(UlyssesPlans, PlansThatDisagreeAreRefused) {
  const Problem p{2, 1, 256, 2, 64};
  std::vector<ExchangePlan> plans{pre_attention_plan(p, 0), pre_attention_plan(p, 1)};
  plans[1].transfers[0].count -= 1;
  std::vector<std::vector<std::vector<float>>> bufs(2, std::vector<std::vector<float>>(kBufs, std::vector<float>(1 << 16)));
  EXPECT_NE(error_of([&] { run_plans_on_host(plans, bufs); }).find("which expects"), std::string::npos);
}

TEST(UlyssesReference, LayerEqualsAttentionOnTheGatheredSequence) {
  for (const Problem p : {Problem{2, 1, 256, 4, 64}, Problem{2, 2, 256, 2, 64, true}, Problem{4, 1, 512, 4, 64}}) {
    SCOPED_TRACE(describe(p));
    const int P = p.ranks;
    const int64_t R = p.rows_per_rank(), H = p.heads, D = p.head_dim, S = p.seq, B = p.batch;
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> fq(B * S * H * D), fk(fq.size()), fv(fq.size());
    for (auto* t : {&fq, &fk, &fv})
      for (auto& x : *t) x = nd(rng);
    std::vector<std::vector<float>> q(P), k(P), v(P);
    for (int r = 0; r < P; ++r)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t s = 0; s < R; ++s) {
          const int64_t from = (b * S + r * R + s) * H * D;
          q[r].insert(q[r].end(), fq.begin() + from, fq.begin() + from + H * D);
          k[r].insert(k[r].end(), fk.begin() + from, fk.begin() + from + H * D);
          v[r].insert(v[r].end(), fv.begin() + from, fv.begin() + from + H * D);
        }
    const auto out = reference_layer(p, q, k, v);
    const auto full = attention::reference_fwd(fq, fk, fv, B, S, S, H, D, p.causal, 1.0 / std::sqrt(double(D)));
    double max_diff = 0;
    for (int r = 0; r < P; ++r)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t s = 0; s < R; ++s)
          for (int64_t e = 0; e < H * D; ++e)
            max_diff = std::max(max_diff, std::abs(out[r][(b * R + s) * H * D + e] - full.o[(b * S + r * R + s) * H * D + e]));
    EXPECT_LT(max_diff, 1e-12);
  }
}

TEST(UlyssesSchedule, AdvisorChoosesInterleavedLocalLast) {
  const auto params = h200_like();
  for (const Problem p : {Problem{2, 1, 4096, 24, 128}, Problem{4, 1, 32768, 40, 128}, Problem{2, 1, 131072, 24, 64}}) {
    SCOPED_TRACE(describe(p));
    for (int r = 0; r < p.ranks; ++r) {
      const FusedSchedule f = choose_schedule(p, r, 132, params);
      const int64_t tiles = p.seq / 128 * p.heads_per_rank();
      EXPECT_EQ(f.stats.remote_tiles, tiles * (p.ranks - 1) / p.ranks);
      EXPECT_GE(f.predicted_stall_ns, 0);
      EXPECT_EQ(f.tiles.count(), tiles);
      // Compute-heavy attention: the model sees no backpressure, so the
      // tie-break picks an interleaved order whose last round stores locally.
      EXPECT_NEAR(f.predicted_stall_ns, 0, 1);
      EXPECT_EQ(f.tiles.order, attention::TileOrder::slice_interleaved) << f.reason;
      attention::TileSpace hm = f.tiles;
      hm.order = attention::TileOrder::head_major;
      EXPECT_LE(f.stats.remote_last_round, simulate_order(p, r, hm, 132).remote_last_round);
      EXPECT_NE(f.reason.find("predicted stall"), std::string::npos);
    }
  }
}

// The completion counts (FusedSignal): walking every CTA's static schedule the way the
// kernel does, what a source adds to each owner's counter in one forward must be
// what the owner's receiver-complete wait expects from it
// (fused_signals_per_forward): per_slice one per slice sent there; per_cta one per
// consumer warpgroup that had a tile (it signals every owner once, after its last
// tile, StaticPersistentScheduler::is_last). For every order the advisor may choose,
// grids that do and do not divide the tile count and grids larger than it, P up to 8.
TEST(UlyssesSchedule, SignalCountsAreWhatTheReceiverWaitsFor) {
  const auto params = h200_like();
  constexpr int kWgs = 2;  // consumer warpgroups of the kernel
  for (const Problem p : {Problem{2, 1, 4096, 24, 128}, Problem{4, 2, 8192, 8, 64}, Problem{8, 1, 16384, 40, 128},
                          Problem{8, 3, 2048, 8, 64}, Problem{8, 1, 1024, 8, 64}}) {
    SCOPED_TRACE(describe(p));
    for (int r = 0; r < p.ranks; ++r) {
      const FusedGeometry g = fused_geometry(p, r);
      ASSERT_EQ(g.ranks, p.ranks);
      for (int grid : {132, 7, 1000}) {
        attention::TileSpace orders[] = {choose_schedule(p, r, std::min(grid, 132), params).tiles, {}};
        orders[1] = orders[0];
        orders[1].order = attention::TileOrder::head_major;
        for (const attention::TileSpace& tiles : orders) {
          const attention::StaticPersistentScheduler sched{tiles, false};
          std::vector<uint32_t> slices(p.ranks, 0), warpgroups(p.ranks, 0);
          for (int cta = 0; cta < grid; ++cta)
            for (int wg = 0; wg < kWgs; ++wg)
              for (attention::WorkTile w = sched.initial_work(cta, grid); w.valid; w = sched.next_work(w, grid)) {
                ++slices[slice_owner(g, w.m_block * kTileRows + wg * 64)];
                if (sched.is_last(w, grid))
                  for (int owner = 0; owner < p.ranks; ++owner) ++warpgroups[owner];
              }
          const std::string where = fmt::format("rank {} grid {} order {}", r, grid, attention::tile_order_name(tiles.order));
          for (int owner = 0; owner < p.ranks; ++owner) {
            EXPECT_EQ(slices[owner], fused_signals_per_forward(p, FusedSignal::per_slice, grid, kWgs)) << where;
            EXPECT_EQ(warpgroups[owner], fused_signals_per_forward(p, FusedSignal::per_cta, grid, kWgs)) << where;
          }
        }
      }
    }
  }
  EXPECT_NE(error_of([] { fused_signals_per_forward(Problem{}, FusedSignal::automatic, 132, 2); })
                .find("automatic"),
            std::string::npos);
}

TEST(UlyssesSchedule, DefaultSignalFollowsTheHeadDimAndLength) {
  EXPECT_EQ(default_signal(Problem{2, 1, 4096, 24, 64}), FusedSignal::per_slice);
  EXPECT_EQ(default_signal(Problem{4, 1, 16384, 40, 128}), FusedSignal::per_cta);
  EXPECT_EQ(default_signal(Problem{4, 1, 32768, 40, 128}), FusedSignal::per_slice);
  EXPECT_STREQ(to_string(FusedSignal::automatic), "automatic");
}

TEST(UlyssesSchedule, SlowDrainPredictsAStallAndTheLeastOneWins) {
  auto params = h200_like();
  params.drain_GBps = 2;  // a starved X-Stage: 132 SMs x 32 KiB per tile overflow it
  params.capacity_bytes_gpu = 1e6;
  const Problem p{2, 1, 4096, 24, 128};
  const FusedSchedule f = choose_schedule(p, 0, 132, params);
  EXPECT_GT(f.predicted_stall_ns, 1000);
  // No candidate is predicted to stall less.
  for (int run : {1, 2, 4, 8, 16}) {
    attention::TileSpace t = f.tiles;
    t.order = attention::TileOrder::slice_interleaved;
    t.slice_run = run;
    const OrderStats s = simulate_order(p, 0, t, 132);
    burstgap::BurstProfile prof;
    prof.bytes_per_burst = tile_store_bytes(p);
    prof.sms = s.sms_remote;
    prof.compute_ns_between_bursts = s.gap_rounds * tile_ns(p, {});
    prof.bursts = s.bursts;
    EXPECT_GE(burstgap::advise(params, prof).predicted_stall_ns, f.predicted_stall_ns - 0.01 * tile_ns(p, {}));
  }
}

TEST(UlyssesBench, SweepIsTheIssues) {
  EXPECT_EQ(bench_sweep({2, 4}, 4096, 131072).size(), 36u);
  const auto two = bench_sweep({2}, 4096, 16384);
  EXPECT_EQ(two.size(), 9u);
  for (const auto& c : two) {
    EXPECT_EQ(c.ranks, 2);
    EXPECT_NO_THROW(validate(c.problem()));
  }
}
