// CPU tests of the Ulysses layer's host logic: the slice-interleaved tile
// order, validation messages, the two All-to-All plans (run on host buffers),
// the fused epilogue's target arithmetic against the serial plan, the
// advisor-chosen schedule, and the whole-layer reference against attention on
// the gathered sequence; the fused QKV projection's owners, destinations, signal
// counts, tile orders and CPU reference (P = 1, 2, 4, 8).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <set>

#include <fmt/format.h>

#include "common/testing.hpp"
#include "xstage/bench/ulysses_bench.hpp"
#include "xstage/ulysses/ulysses.hpp"
#include "xstage/ulysses/qkv.hpp"

using namespace xstage;
using namespace xstage::ulysses;
using common::error_of;

namespace {

// A value that names its global position (b, s, h, d) of the full [B, S, H, D] tensor.
double code(int64_t b, int64_t s, int64_t h, int64_t d) { return ((b * 100000 + s) * 1000 + h) * 1000 + d; }
// A [B, rows, heads, D] buffer whose element (b, s, h, d) is code(b, s0 + s, h0 + h, d).
std::vector<double> coded(int64_t B, int64_t rows, int64_t heads, int64_t D, int64_t s0, int64_t h0) {
  std::vector<double> x(B * rows * heads * D);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < rows; ++s)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t d = 0; d < D; ++d) x[((b * rows + s) * heads + h) * D + d] = code(b, s0 + s, h0 + h, d);
  return x;
}

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

// A tile space of `slices` owner slices of `per_slice` m-blocks, 3 heads, 2 batches.
attention::TileSpace slice_space(attention::TileOrder order, int slices, int per_slice, int first, int run = 1) {
  attention::TileSpace sp;
  sp.m_blocks = slices * per_slice;
  sp.heads = 3;
  sp.batches = 2;
  sp.order = order;
  sp.slices = slices;
  sp.slice_first = first;
  sp.slice_run = run;
  return sp;
}

}  // namespace

TEST(UlyssesTileOrder, OwnerMajorIsAPermutationOwnerByOwner) {
  for (int slices : {1, 2, 4, 8}) {
    for (int per_slice : {1, 3, 4}) {
      for (int first = 0; first < slices; ++first) {
        const auto sp = slice_space(attention::TileOrder::owner_major, slices, per_slice, first);
        std::set<std::tuple<int, int, int>> seen;
        const int64_t per_owner = int64_t(per_slice) * 3 * 2;
        for (int64_t i = 0; i < sp.count(); ++i) {
          const auto w = sp.tile(i);
          ASSERT_TRUE(w.valid);
          ASSERT_TRUE(seen.insert({w.batch, w.head, w.m_block}).second) << "tile twice at " << i;
          // Owner k of the order is slice first + k; inside it m-block fastest, then head, then batch.
          EXPECT_EQ(w.m_block / per_slice, (first + int(i / per_owner)) % slices) << "position " << i;
          const int64_t in_owner = i % per_owner;
          EXPECT_EQ(w.m_block % per_slice, int(in_owner % per_slice));
          EXPECT_EQ(w.head, int((in_owner / per_slice) % 3));
          EXPECT_EQ(w.batch, int(in_owner / (per_slice * 3)));
        }
        EXPECT_EQ(int64_t(seen.size()), sp.count());
        EXPECT_FALSE(sp.tile(sp.count()).valid);
      }
    }
  }
}

// With chunks of c m-blocks an owner's tiles go chunk by chunk (m-block fastest inside a
// chunk, then head, then batch), and each chunk's counters are the chunk of its rows.
TEST(UlyssesTileOrder, OwnerMajorChunksGoOneAfterAnother) {
  for (int slices : {1, 2, 4}) {
    for (int per_slice : {1, 2, 4, 8}) {
      for (int chunk = 1; chunk <= per_slice; chunk *= 2) {
        auto sp = slice_space(attention::TileOrder::owner_major, slices, per_slice, slices - 1);
        sp.chunk_blocks = chunk;
        const int64_t per_chunk = int64_t(chunk) * 3 * 2, per_owner = int64_t(per_slice) * 3 * 2;
        std::set<std::tuple<int, int, int>> seen;
        for (int64_t i = 0; i < sp.count(); ++i) {
          const auto w = sp.tile(i);
          ASSERT_TRUE(seen.insert({w.batch, w.head, w.m_block}).second) << "tile twice at " << i;
          ASSERT_EQ(w.m_block / per_slice, (slices - 1 + int(i / per_owner)) % slices) << "position " << i;
          const int64_t in_owner = i % per_owner, in_chunk = in_owner % per_chunk;
          ASSERT_EQ(w.m_block % per_slice, int(in_owner / per_chunk) * chunk + int(in_chunk % chunk));
          ASSERT_EQ(w.head, int((in_chunk / chunk) % 3));
          ASSERT_EQ(w.batch, int(in_chunk / (chunk * 3)));
          const FusedGeometry g{per_slice * kTileRows, slices, 0, 0, 0, 64, chunk * kTileRows};
          ASSERT_EQ(slice_chunk(g, w.m_block * kTileRows + 64), (w.m_block % per_slice) / chunk);
        }
        EXPECT_EQ(int64_t(seen.size()), sp.count());
      }
    }
  }
  // Without chunks every slice counts on its owner's one counter.
  const FusedGeometry whole{256, 2, 0, 0, 0, 64, 0};
  EXPECT_EQ(slice_chunk(whole, 448), 0);
  // Chunks that do not divide an owner's row blocks are refused.
  EXPECT_THROW(owner_major_tiles(Problem{2, 1, 4096, 24, 128}, 0, 3), std::exception);
  EXPECT_EQ(owner_major_tiles(Problem{2, 1, 4096, 24, 128}, 1, 4).chunk_blocks, 4);
}

TEST(UlyssesTileOrder, SliceInterleavedIsAPermutationWithLocalLast) {
  for (int slices : {1, 2, 4}) {
    for (int per_slice : {1, 2, 4, 8}) {
      for (int run = 1; run <= per_slice; run *= 2) {
        for (int first = 0; first < slices; ++first) {
          const auto sp = slice_space(attention::TileOrder::slice_interleaved, slices, per_slice, first, run);
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
  EXPECT_EQ(error_of([&] { validate({2, 1, 4096, 24, 128, false, 4000}); }), "");
  EXPECT_NE(error_of([&] { validate({2, 1, 4096, 24, 128, false, 4097}); }).find("4097 valid rows is outside 0 .. S = 4096"),
            std::string::npos);
  EXPECT_NE(error_of([&] { validate({2, 1, 4096, 24, 128, true, 4000}); }).find("causal attention over a padded"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { validate({2, 1, 4096, 24, 128, true, 4096}); }), "");  // all valid: no padding
  EXPECT_EQ(describe({2, 1, 4096, 24, 128, false, 4000}), "P=2 B=1 S=4096 (4000 valid) H=24 D=128");
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
    bufs[r][size_t(Buf::input)] = coded(B, R, H, D, r * R, 0);
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
    bufs[r][size_t(Buf::attn)] = coded(B, S, Hp, D, 0, r * Hp);
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

// Padding: the layer over S rows of which the first `valid` are tokens gives
// those tokens exactly the attention of the unpadded sequence, whatever the
// padded rows hold (NaN here: a padded key that was read would show).
TEST(UlyssesReference, PaddedRowsAreNotKeys) {
  for (const Problem p : {Problem{2, 1, 256, 4, 64, false, 200}, Problem{4, 2, 512, 4, 64, false, 300},
                          Problem{4, 1, 512, 4, 64, false, 129}, Problem{8, 1, 1024, 8, 64, false, 1000}}) {
    SCOPED_TRACE(describe(p));
    const int P = p.ranks;
    const int64_t R = p.rows_per_rank(), HD = p.heads * p.head_dim, S = p.seq, B = p.batch, N = p.keys();
    std::mt19937 rng(11);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> fq(B * N * HD), fk(fq.size()), fv(fq.size());  // the real tokens only
    for (auto* t : {&fq, &fk, &fv})
      for (auto& x : *t) x = nd(rng);
    std::vector<std::vector<float>> q(P), k(P), v(P);
    for (int r = 0; r < P; ++r)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t s = r * R; s < (r + 1) * R; ++s)
          for (int64_t e = 0; e < HD; ++e) {
            const bool real = s < N;
            q[r].push_back(real ? fq[(b * N + s) * HD + e] : 1.f);  // padded queries: computed, then ignored
            k[r].push_back(real ? fk[(b * N + s) * HD + e] : NAN);
            v[r].push_back(real ? fv[(b * N + s) * HD + e] : NAN);
          }
    const auto out = reference_layer(p, q, k, v);
    const auto want = attention::reference_fwd(fq, fk, fv, B, N, N, p.heads, p.head_dim, false,
                                               1.0 / std::sqrt(double(p.head_dim)));
    double max_diff = 0;
    int64_t compared = 0;
    for (int r = 0; r < P; ++r)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t s = r * R; s < (r + 1) * R; ++s)
          for (int64_t e = 0; e < HD; ++e) {
            const double got = out[r][(b * R + s - r * R) * HD + e];
            if (s >= N) {
              EXPECT_TRUE(std::isfinite(got)) << "padded row " << s << " attends a padded key";
              continue;
            }
            max_diff = std::max(max_diff, std::isfinite(got) ? std::abs(got - want.o[(b * N + s) * HD + e]) : INFINITY);
            ++compared;
          }
    EXPECT_EQ(compared, B * N * HD);
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
// (fused_signals_per_forward): per_slice and by_agent one per slice sent there; per_cta one per
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
            // The agent adds each tile's slices to their owner: the per-slice counts.
            EXPECT_EQ(slices[owner], fused_signals_per_forward(p, FusedSignal::by_agent, grid, kWgs)) << where;
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

TEST(UlyssesQkv, RefusesShapesItCannotTile) {
  EXPECT_EQ(error_of([] { validate_qkv({2, 1, 4096, 24, 128}); }), "");
  EXPECT_NE(error_of([] { validate_qkv({2, 1, 4096, 24, 64}); }).find("needs D = 128 (got D = 64)"), std::string::npos);
  EXPECT_NE(error_of([] { validate_qkv({4, 1, 4096, 6, 128}); }).find("H % P"), std::string::npos)
      << error_of([] { validate_qkv({4, 1, 4096, 6, 128}); });
}

// Every (source, local row, part, head) lands on a distinct row of D elements of
// its owner's buffer, and together they fill it: the layout of the pre-attention
// All-to-All, [B, S, H/P, D] with source r's rows at r·S/P.
TEST(UlyssesQkv, DestinationsTileEveryOwnersBufferOnce) {
  for (int P : {1, 2, 4, 8}) {
    const Problem p{P, 2, 128 * P * 2, 24, 128};
    validate_qkv(p);
    const int Hp = int(p.heads_per_rank());
    const int64_t R = p.rows_per_rank(), per_owner = p.batch * p.seq * Hp;
    std::vector<std::vector<int>> hits(size_t(P), std::vector<int>(size_t(per_owner), 0));
    for (int src = 0; src < P; ++src)
      for (int64_t m = 0; m < qkv_rows(p); ++m)
        for (int head = 0; head < p.heads; ++head) {
          const int64_t off = qkv_dest_offset(m, head, src, R, p.seq, Hp);
          ASSERT_EQ(off % kQkvHeadDim, 0);
          ASSERT_GE(off, 0);
          ASSERT_LT(off / kQkvHeadDim, per_owner);
          const int owner = qkv_owner(head, int(p.heads), Hp);
          ++hits[owner][size_t(off / kQkvHeadDim)];
          // The row is the global sequence row of (b, s), the head the owner's local one.
          const int64_t b = m / R, s = m % R;
          EXPECT_EQ(off / kQkvHeadDim, ((b * p.seq + src * R + s) * Hp + head % Hp)) << "P " << P;
        }
    for (int o = 0; o < P; ++o)
      for (int c : hits[o]) ASSERT_EQ(c, 1) << "P " << P << " owner " << o;
  }
}

TEST(UlyssesQkv, SignalCountsAreWhatEachOwnerReceives) {
  for (int P : {1, 2, 4, 8})
    for (int H : {24, 40}) {
      if (H % P) continue;
      const Problem p{P, 1, 256 * P, H, 128};
      // What the kernel adds: per tile, per consumer warpgroup (2), one per head to its owner.
      std::vector<uint32_t> got(size_t(P), 0);
      for (int t = 0; t < qkv_tiles(p); ++t)
        for (int half = 0; half < 2; ++half) {
          const int gh = 2 * (t % qkv_col_tiles(p)) + half;
          if (gh < 3 * H) got[qkv_owner(gh, H, H / P)] += 2;
        }
      for (int o = 0; o < P; ++o) EXPECT_EQ(got[o], qkv_signals_per_source(p)) << "P " << P << " H " << H;
    }
}

TEST(UlyssesQkv, OrdersArePermutationsAndInterleaveOwners) {
  for (int P : {2, 4, 8}) {
    const Problem p{P, 1, 128 * P * 2, 24, 128};
    const int ct = qkv_col_tiles(p), Hp = 24 / P;
    for (int rank = 0; rank < P; ++rank) {
      for (QkvOrder kind : {QkvOrder::natural, QkvOrder::owner_interleaved}) {
        std::vector<int> o = qkv_tile_order(p, rank, kind);
        ASSERT_EQ(int(o.size()), qkv_tiles(p));
        std::vector<int> sorted = o;
        std::sort(sorted.begin(), sorted.end());
        for (int i = 0; i < int(sorted.size()); ++i) ASSERT_EQ(sorted[i], i);
        if (kind == QkvOrder::natural) {
          EXPECT_TRUE(std::is_sorted(o.begin(), o.end()));
          continue;
        }
        // Per m block: the first tile goes to rank + 1, the first P - 1 tiles to P - 1
        // different remote owners, and tiles whose heads are all local come last.
        for (int m = 0; m < qkv_m_blocks(p); ++m) {
          std::vector<int> owners;
          for (int i = 0; i < ct; ++i) {
            ASSERT_EQ(o[m * ct + i] / ct, m);
            owners.push_back(qkv_owner(2 * (o[m * ct + i] % ct), 24, Hp));
          }
          EXPECT_EQ(owners[0], (rank + 1) % P);
          std::set<int> first(owners.begin(), owners.begin() + (P - 1));
          EXPECT_EQ(int(first.size()), P - 1) << "P " << P << " rank " << rank;
          EXPECT_EQ(first.count(rank), 0u);
          bool local_seen = false;
          for (int i = 0; i < ct; ++i) {
            const int t = o[m * ct + i] % ct;
            const bool all_local = qkv_owner(2 * t, 24, Hp) == rank &&
                                   (2 * t + 1 >= 72 || qkv_owner(2 * t + 1, 24, Hp) == rank);
            if (all_local) local_seen = true;
            else EXPECT_FALSE(local_seen) << "a remote tile after a local one, P " << P << " rank " << rank;
          }
        }
      }
    }
  }
}

// Grouped raster: the same tiles; per group of m blocks, column tile by column
// tile in the group-1 order of one m block, m fastest; the L2 rule's group.
TEST(UlyssesQkv, GroupedOrderKeepsTheColumnOrderPerGroup) {
  const Problem p{4, 1, 128 * 4 * 40, 24, 128};  // 40 m blocks per rank
  const int ct = qkv_col_tiles(p), mb = qkv_m_blocks(p);
  EXPECT_EQ(qkv_raster_group(p, 132), 16);
  EXPECT_EQ(qkv_raster_group(Problem{4, 1, 128 * 4 * 3, 24, 128}, 132), 3);  // clamped to the m blocks
  EXPECT_EQ(qkv_raster_group(p, 2), 2);
  for (int rank = 0; rank < 4; ++rank) {
    const auto one = qkv_tile_order(p, rank, QkvOrder::owner_interleaved, 1);
    const auto g = qkv_tile_order(p, rank, QkvOrder::owner_interleaved, 16);
    ASSERT_EQ(g.size(), one.size());
    std::vector<int> sorted = g;
    std::sort(sorted.begin(), sorted.end());
    for (int i = 0; i < int(sorted.size()); ++i) ASSERT_EQ(sorted[i], i);
    std::size_t i = 0;
    for (int m0 = 0; m0 < mb; m0 += 16)
      for (int c = 0; c < ct; ++c)
        for (int m = m0; m < std::min(mb, m0 + 16); ++m, ++i) EXPECT_EQ(g[i], m * ct + one[c] % ct);
  }
  const QkvSchedule s = choose_qkv_schedule(p, 1, 132, h200_like());
  EXPECT_EQ(s.group, 16);
  EXPECT_EQ(s.order, qkv_tile_order(p, 1, s.order_kind, 16));
  EXPECT_NE(s.reason.find("groups of 16"), std::string::npos);
  EXPECT_EQ(choose_qkv_schedule(p, 1, 132, h200_like(), {}, 1).order, qkv_tile_order(p, 1, s.order_kind, 1));
  EXPECT_NE(error_of([&] { qkv_tile_order(p, 1, QkvOrder::natural, 0); }).find("raster group"), std::string::npos);
}

// The split tail: only when the leftover tiles fit half the CTAs, each leftover tile
// becomes its one-head entries (one for a tile whose second head is past 3H), each
// CTA gets at most one of them, and every head is still computed exactly once.
TEST(UlyssesQkv, SplitTailHalvesTheLastRound) {
  EXPECT_EQ(qkv_entry_tile(qkv_entry(12345, 2)), 12345);
  EXPECT_EQ(qkv_entry_sel(qkv_entry(12345, 2)), 2);
  EXPECT_EQ(qkv_entry_sel(12345), 0);
  struct Case {
    Problem p;
    int grid;
    bool splits;
  };
  // flux-like on 4 ranks: 8 x 36 = 288 tiles on 132 CTAs, 24 left: split. H = 40, P = 4:
  // 480 tiles, 84 left > 66: not split. H = 5: odd 3H. No remainder: not split.
  for (const auto& [p, grid, splits] :
       {Case{Problem{4, 1, 4096, 24, 128}, 132, true}, Case{Problem{4, 1, 4096, 40, 128}, 132, false},
        Case{Problem{1, 2, 256, 5, 128}, 26, true}, Case{Problem{1, 1, 512, 8, 128}, 48, false}}) {
    SCOPED_TRACE(describe(p));
    const auto whole = qkv_tile_order(p, 0, QkvOrder::owner_interleaved, qkv_raster_group(p, grid));
    const auto e = qkv_split_tail(p, whole, grid);
    const int T = qkv_tiles(p), full = T / grid * grid;
    if (!splits) {
      EXPECT_EQ(e, whole);
      continue;
    }
    ASSERT_GT(e.size(), whole.size());
    ASSERT_LE(int(e.size()), full + grid) << "one entry per CTA in the last round";
    for (int i = 0; i < full; ++i) EXPECT_EQ(e[i], whole[i]);
    std::vector<int> heads(static_cast<std::size_t>(T) * 2, 0);  // (tile, half) computed
    for (int x : e) {
      const int t = qkv_entry_tile(x), sel = qkv_entry_sel(x), ct = t % qkv_col_tiles(p);
      const bool has2 = 2 * ct + 1 < 3 * p.heads;
      if (sel != 2) ++heads[2 * t];
      if (sel == 2 || (sel == 0 && has2)) ++heads[2 * t + 1];
      if (sel != 0) EXPECT_GE(&x - e.data(), full) << "one-head entries only in the last round";
    }
    for (int t = 0; t < T; ++t) {
      const int ct = t % qkv_col_tiles(p);
      EXPECT_EQ(heads[2 * t], 1) << t;
      EXPECT_EQ(heads[2 * t + 1], 2 * ct + 1 < 3 * p.heads ? 1 : 0) << t;
    }
  }
  // The advisor applies it (and reports it), unless told not to.
  const Problem flux{4, 1, 4096, 24, 128};
  const QkvSchedule s = choose_qkv_schedule(flux, 1, 132, h200_like());
  EXPECT_TRUE(s.split_tail);
  EXPECT_EQ(s.order.size(), 264u + 48u);
  EXPECT_NE(s.reason.find("split"), std::string::npos);
  const QkvSchedule u = choose_qkv_schedule(flux, 1, 132, h200_like(), {}, 0, false);
  EXPECT_FALSE(u.split_tail);
  EXPECT_EQ(int(u.order.size()), qkv_tiles(flux));
  EXPECT_NE(error_of([&] { qkv_split_tail(flux, s.order, 132); }).find("whole-tile"), std::string::npos);
}

TEST(UlyssesQkv, AdvisorProfilesTheRemoteStores) {
  const Problem p{4, 1, 8192, 24, 128};
  const QkvSchedule s = choose_qkv_schedule(p, 1, 132, h200_like());
  EXPECT_TRUE(s.split_tail);  // 576 tiles on 132 CTAs: 48 left, split into 96 one-head entries
  EXPECT_EQ(int(s.order.size()), qkv_tiles(p) + 48);
  EXPECT_EQ(s.grid, 132);
  EXPECT_GT(s.remote_tiles, 0);
  EXPECT_LE(s.max_remote_ctas, 132);
  // 2·128·256·3072 flop at 4.6 TFLOP/s per SM.
  EXPECT_NEAR(s.tile_ns, 2.0 * 128 * 256 * 3072 / 4.6e3, 1e-6);
  EXPECT_NE(s.reason.find("predicted stall"), std::string::npos);
  // A starved X-Stage: the same stores are predicted to stall, and the choice is the least stalled.
  auto slow = h200_like();
  slow.drain_GBps = 2;
  slow.capacity_bytes_gpu = 1e6;
  const QkvSchedule t = choose_qkv_schedule(p, 1, 132, slow);
  EXPECT_GT(t.predicted_stall_ns, 1000);
  EXPECT_GT(t.predicted_stall_ns, s.predicted_stall_ns);
  EXPECT_NE(error_of([&] { choose_qkv_schedule(p, 1, 0, slow); }).find("grid must be >= 1"), std::string::npos);
}


// The reference at P = 2 holds exactly what the P = 1 reference computes, split
// by heads and laid out as [B, S, H/P, D]; with unit norm weights and no turn,
// every q and k row has RMS 1.
TEST(UlyssesQkv, ReferenceIsTheSameProjectionAtEveryP) {
  const Problem p2{2, 1, 256, 4, 128}, p1{1, 1, 256, 4, 128};
  const QkvHost in2 = qkv_random_inputs(p2, 7);
  QkvHost in1 = in2;
  in1.h = {in2.h[0]};
  in1.cos = {in2.cos[0]};
  in1.sin = {in2.sin[0]};
  for (int r = 1; r < 2; ++r) {
    in1.h[0].insert(in1.h[0].end(), in2.h[r].begin(), in2.h[r].end());
    in1.cos[0].insert(in1.cos[0].end(), in2.cos[r].begin(), in2.cos[r].end());
    in1.sin[0].insert(in1.sin[0].end(), in2.sin[r].begin(), in2.sin[r].end());
  }
  const QkvOwnerOut one = qkv_reference(p1, in1, 0);
  for (int owner = 0; owner < 2; ++owner) {
    const QkvOwnerOut mine = qkv_reference(p2, in2, owner);
    for (int64_t s = 0; s < 256; ++s)
      for (int hl = 0; hl < 2; ++hl)
        for (int64_t d = 0; d < 128; ++d) {
          const size_t a = size_t(((s * 4) + owner * 2 + hl) * 128 + d), b = size_t(((s * 2) + hl) * 128 + d);
          ASSERT_EQ(one.q[a], mine.q[b]);
          ASSERT_EQ(one.k[a], mine.k[b]);
          ASSERT_EQ(one.v[a], mine.v[b]);
        }
  }
  const QkvOwnerOut plain = qkv_reference(p1, qkv_random_inputs(p1, 9, true), 0);
  for (int64_t row = 0; row < 256 * 4; ++row) {
    double sq = 0, sk = 0;
    for (int64_t d = 0; d < 128; ++d) {
      sq += double(plain.q[size_t(row * 128 + d)]) * plain.q[size_t(row * 128 + d)];
      sk += double(plain.k[size_t(row * 128 + d)]) * plain.k[size_t(row * 128 + d)];
    }
    ASSERT_NEAR(std::sqrt(sq / 128), 1.0, 0.01);
    ASSERT_NEAR(std::sqrt(sk / 128), 1.0, 0.01);
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

// evaluate_order is what choose_schedule scores: the chosen order's figures come back
// from evaluate_order of its slice run.
TEST(UlyssesSchedule, EvaluateOrderIsWhatChooseScheduleScored) {
  const auto params = h200_like();
  for (const Problem p : {Problem{2, 1, 4096, 24, 128}, Problem{8, 1, 16384, 40, 128}}) {
    for (int r : {0, p.ranks - 1}) {
      const FusedSchedule f = choose_schedule(p, r, 132, params);
      const FusedSchedule g = evaluate_order(p, r, 132, f.slice_run, params);
      EXPECT_EQ(g.predicted_stall_ns, f.predicted_stall_ns) << describe(p);
      EXPECT_EQ(g.stats.remote_tiles, f.stats.remote_tiles);
      EXPECT_EQ(g.tiles.order, f.tiles.order);
      EXPECT_LE(f.predicted_stall_ns, evaluate_order(p, r, 132, 0, params).predicted_stall_ns + 0.01 * tile_ns(p, {}));
    }
  }
  EXPECT_NE(error_of([] { evaluate_order(Problem{2, 1, 4096, 24, 128}, 0, 132, 99, h200_like()); }).find("slice run"),
            std::string::npos);
}

// On the host link's fit (xstage/data/h200_host_params.json): a 128-row tile of
// attention over S >= 4K keys takes ~60 us per SM at D = 128, while its 32 KiB store
// drains in about that even when every CTA stores at once (132 x 32 KiB at ~60 GB/s:
// ~70 us per round of 60 us, and only (P-1)/P of the tiles are remote): row-major is
// predicted to stall for less than one tile's time (with the fit's backlog limit each
// round waits out what the last one left). With tiles ten times faster (a hypothetical
// tile model) and 20 rounds, row-major stalls a lot, and the advisor's order stalls less.
TEST(UlyssesHostLink, TheHostFitOnAttentionTiles) {
  const char* src = std::getenv("XSTAGE_SOURCE_DIR");
  ASSERT_NE(src, nullptr) << "run through ctest (XSTAGE_SOURCE_DIR)";
  const auto host = burstgap::read_params(std::string(src) + "/xstage/data/h200_host_params.json").find("host", "st16");
  for (const Problem p : {Problem{2, 1, 4096, 24, 128}, Problem{8, 1, 4096, 24, 64}, Problem{8, 1, 65536, 40, 128}})
    EXPECT_LT(evaluate_order(p, 0, 132, 0, host).predicted_stall_ns, tile_ns(p, {})) << describe(p);
  TileTimeModel fast;
  fast.sm_tflops_d128 *= 10;
  fast.tile_overhead_ns /= 10;
  const Problem p{2, 1, 16384, 40, 128};  // 20 rounds of tiles: the stage fills
  const FusedSchedule rm = evaluate_order(p, 0, 132, 0, host, fast);
  const FusedSchedule best = choose_schedule(p, 0, 132, host, fast);
  EXPECT_GT(rm.predicted_stall_ns, 1000) << rm.advice.reason;
  EXPECT_LT(best.predicted_stall_ns, rm.predicted_stall_ns) << best.reason;
}

// The derived figures and the summary, on rows made by hand.
TEST(UlyssesHostLink, RowsAndSummary) {
  HostLinkRow a;
  a.attention_guided_ms = 1.0;
  a.attention_row_major_ms = 1.0;
  a.predicted_stall_guided_us = 100;    // 1.1 ms predicted
  a.predicted_stall_row_major_us = 650; // 1.65 ms predicted
  a.schedule = "sm_stores";             // fused_guided_ms is then the SM-store order's time
  a.fused_sm_guided_ms = 1.2;
  a.fused_ce_drain_ms = 9.9;
  a.fused_row_major_ms = 1.5;
  a.exchange_after_ms = 2.4;
  a.remote_bytes = 6e6;
  finish_host_link_row(a);
  EXPECT_DOUBLE_EQ(a.speedup_vs_row_major, 1.25);
  EXPECT_DOUBLE_EQ(a.predicted_speedup_vs_row_major, 1.5);
  EXPECT_DOUBLE_EQ(a.speedup_vs_exchange_after, 2.0);
  EXPECT_TRUE(a.stall_predicted);
  EXPECT_DOUBLE_EQ(a.link_GBps, 5.0);
  HostLinkRow b = a;  // no predicted stall (under 1 % of attention): not in the geomean
  b.predicted_stall_row_major_us = 5;
  b.predicted_stall_guided_us = 5;
  b.fused_row_major_ms = 1.2;
  finish_host_link_row(b);
  EXPECT_FALSE(b.stall_predicted);
  EXPECT_DOUBLE_EQ(a.fused_guided_ms, 1.2);
  HostLinkRow c = a;
  c.fused_row_major_ms = 2.4 * 1.2;  // measured 2.4
  finish_host_link_row(c);
  const HostLinkSummary s = summarize_host_link({a, b, c});
  EXPECT_EQ(s.rows_where_stall_predicted, 2);
  EXPECT_NEAR(s.geomean_where_stall_predicted, std::sqrt(1.25 * 2.4), 1e-12);
  // |1.5 - 1.25| / 1.25 = 0.2, |1 - 1| = 0, |1.5 - 2.4| / 2.4 = 0.375: median 0.2
  EXPECT_NEAR(s.speedup_prediction_median_abs_rel_error, 0.2, 1e-12);
  EXPECT_DOUBLE_EQ(s.min_speedup, 1.0);
  EXPECT_DOUBLE_EQ(s.max_speedup, 2.4);
  // The hiding bound: row-major over attention alone (a: 1.5, c: 2.88), and the drain's
  // chunks over one per owner where both ran (none here).
  EXPECT_DOUBLE_EQ(a.hiding_bound_vs_row_major, 1.5);
  EXPECT_NEAR(s.hiding_bound_geomean, std::sqrt(1.5 * 2.88), 1e-12);
  EXPECT_DOUBLE_EQ(s.chunked_over_owner_drain_geomean, -1);
  HostLinkRow d = a;
  d.fused_ce_drain_ms = 0.8;
  d.fused_ce_owner_ms = 1.0;
  EXPECT_DOUBLE_EQ(summarize_host_link({a, d}).chunked_over_owner_drain_geomean, 1.25);
  EXPECT_EQ(summarize_host_link({}).rows_where_stall_predicted, 0);
}

// The achievable bound, by hand: the first remote bytes leave after one round of the
// fastest attention, all of them at the copy rate; never below attention, never above
// row-major SM stores as measured.
TEST(UlyssesHostLink, AchievableBoundByHand) {
  // P = 2, S = 4096, H = 24, D = 128, rank 0: 32 m-blocks x 12 heads = 384 tiles, 3 rounds
  // on 132 SMs; 2048 rows x 12 heads x 128 x 2 = 6,291,456 bytes to owner 1.
  HostLinkRow a;
  a.config = {4096, 2, 24, 128};
  a.sms = 132;
  a.attention_guided_ms = 0.16;
  a.attention_row_major_ms = 0.15;  // the fastest order
  a.attention_owner_ms = 0.17;
  a.fused_row_major_ms = 0.26;
  a.copy_GBps = 60;
  EXPECT_DOUBLE_EQ(rank_remote_bytes(a.config.problem()), 6291456);
  set_achievable_bound(a);
  const double copy60 = 6291456 / 60e6;  // ms
  EXPECT_NEAR(a.achievable_ms, 0.15 / 3 + copy60, 1e-12);
  EXPECT_NEAR(a.achievable_bound_vs_row_major, 0.26 / (0.05 + copy60), 1e-12);
  // Fewer SMs: 384 tiles on 64 make 6 rounds, the first bytes leave at 0.025 ms and the
  // copy ends before attention, which is then the bound; at 30 GB/s it ends after it.
  HostLinkRow six = a;
  six.sms = 64;
  set_achievable_bound(six);
  EXPECT_DOUBLE_EQ(six.achievable_ms, 0.15);
  six.copy_GBps = 30;
  set_achievable_bound(six);
  EXPECT_NEAR(six.achievable_ms, 0.15 / 6 + 6291456 / 30e6, 1e-12);
  // No copy_GBps: the rate of the exchange after attention (40 GB/s here).
  HostLinkRow old = a;
  old.copy_GBps = 0;
  old.exchange_after_ms = 0.15 + 6291456 / 40e6;
  set_achievable_bound(old);
  EXPECT_NEAR(old.achievable_ms, 0.05 + 6291456 / 40e6, 1e-12);
  // P = 8, S = 4096: 96 tiles, one round on 132 SMs, so nothing leaves before attention
  // ends: attention + 7 x 512 x 3 x 128 x 2 bytes at 50 GB/s is above row-major as
  // measured, which is then the bound (1).
  HostLinkRow one;
  one.config = {4096, 8, 24, 128};
  one.sms = 132;
  one.attention_guided_ms = one.attention_row_major_ms = 0.055;
  one.fused_row_major_ms = 0.1;
  one.copy_GBps = 50;
  set_achievable_bound(one);
  EXPECT_GT(0.055 + 2752512 / 50e6, 0.1);
  EXPECT_DOUBLE_EQ(one.achievable_ms, 0.1);
  EXPECT_DOUBLE_EQ(one.achievable_bound_vs_row_major, 1.0);
  // Many rounds (P = 2, S = 65536, H = 40: 10,240 tiles, 78 rounds): the copy hides behind
  // attention, and the bound is the hiding bound.
  HostLinkRow many;
  many.config = {65536, 2, 40, 128};
  many.sms = 132;
  many.attention_guided_ms = many.attention_row_major_ms = many.attention_owner_ms = 10;
  many.fused_row_major_ms = 12;
  many.copy_GBps = 50;
  set_achievable_bound(many);
  EXPECT_DOUBLE_EQ(many.achievable_ms, 10);
  EXPECT_DOUBLE_EQ(many.achievable_bound_vs_row_major, 1.2);
  // A row without sms (or without a copy rate) has no bound: 0, and the summary leaves it out.
  HostLinkRow none = a;
  none.sms = 0;
  set_achievable_bound(none);
  EXPECT_EQ(none.achievable_ms, 0);
  EXPECT_EQ(none.achievable_bound_vs_row_major, 0);
  // The summary over the rows with a predicted stall and a bound: a, one and many.
  for (HostLinkRow* r : {&a, &one, &many, &none}) r->stall_predicted = true;
  a.speedup_vs_row_major = 1.3;
  one.speedup_vs_row_major = 0.99;
  many.speedup_vs_row_major = 1.2;
  none.speedup_vs_row_major = 1.1;
  const HostLinkSummary s = summarize_host_link({a, one, many, none});
  EXPECT_EQ(s.rows_where_stall_predicted, 4);
  const double ba = 0.26 / (0.05 + copy60);
  EXPECT_NEAR(s.achievable_bound_geomean, std::cbrt(ba * 1.0 * 1.2), 1e-12);
  EXPECT_NEAR(s.speedup_over_achievable_geomean, std::cbrt(1.3 / ba * 0.99 * 1.0), 1e-12);
  EXPECT_EQ(summarize_host_link({none}).achievable_bound_geomean, -1);
  // finish_host_link_row sets it too; a results row read back gives the same bound.
  HostLinkRow f = a;
  f.achievable_ms = 0;
  finish_host_link_row(f);
  EXPECT_DOUBLE_EQ(f.achievable_ms, a.achievable_ms);
  const nlohmann::json j = {{"S", 4096}, {"P", 2}, {"H", 24}, {"D", 128}, {"rank", 0}, {"sms", 132},
                            {"attention_guided_ms", 0.16}, {"attention_row_major_ms", 0.15},
                            {"attention_owner_ms", 0.17}, {"fused_row_major_ms", 0.26}, {"copy_GBps", 60.0},
                            {"speedup_vs_row_major", 1.3}, {"stall_predicted", true}};
  HostLinkRow back = host_link_row_from_json(j);
  set_achievable_bound(back);
  EXPECT_DOUBLE_EQ(back.achievable_ms, a.achievable_ms);
  EXPECT_TRUE(back.stall_predicted);
  EXPECT_DOUBLE_EQ(back.speedup_vs_row_major, 1.3);
}

// The two host-link schedules' predicted times, by hand.
TEST(UlyssesHostLink, SchedulePredictions) {
  // SM stores: attention + remote bytes at the drain rate (GB/s = 1e6 B/ms).
  burstgap::ModelParams link60, link50;
  link60.drain_GBps = 60;
  link50.drain_GBps = 50;
  EXPECT_DOUBLE_EQ(predict_sm_stores_ms(0.15, 6e6, link60), 0.25);
  // P = 2, S = 4096, H = 24, D = 128, rank 0, 132 CTAs: 32 m-blocks x 12 heads = 384 tiles,
  // 3 rounds; owner 1's 192 tiles come first and end in round 1, so its 6,291,456 bytes
  // start leaving at 2/3 of attention and take 6291456 / 60e6 ms.
  const Problem p2{2, 1, 4096, 24, 128};
  const double copy = 6291456.0 / 60e6;
  EXPECT_NEAR(predict_copy_engine_drain_ms(p2, 0, 132, 0.15, link60), 0.1 + copy, 1e-12);
  // Rank 1 drains owner 0 the same way.
  EXPECT_NEAR(predict_copy_engine_drain_ms(p2, 1, 132, 0.15, link60), 0.1 + copy, 1e-12);
  // A slow compute hides the copy: the forward is attention.
  EXPECT_DOUBLE_EQ(predict_copy_engine_drain_ms(p2, 0, 132, 30.0, link60), 30.0);
  // P = 4, S = 8192, H = 24 (6 heads): 64 m-blocks x 6 = 384 tiles, 96 per owner; owners 1, 2, 3
  // end in rounds 0, 1, 2 of 3; each owner's rows: 2048 x 6 x 128 x 2 = 3,145,728 bytes.
  const Problem p4{4, 1, 8192, 24, 128};
  const double c4 = 3145728.0 / 50e6, r4 = 0.3 / 3;
  double end = r4 + c4;
  end = std::max(end, 2 * r4) + c4;
  end = std::max(end, 3 * r4) + c4;
  EXPECT_NEAR(predict_copy_engine_drain_ms(p4, 0, 132, 0.3, link50), std::max(0.3, end), 1e-12);

  // The advisor: one round of tiles (P = 8, S = 4096: 96 tiles on 132 CTAs) finishes every
  // owner at the end, so the copies cannot overlap anything and SM stores stay; with
  // several rounds the copy-engine drain wins.
  HostLinkRow one;
  one.config = {4096, 8, 24, 128};
  one.attention_row_major_ms = 0.055;
  one.remote_bytes = 7.0 * 512 * 3 * 128 * 2;
  advise_host_link_schedule(one, 132, link60);
  EXPECT_EQ(one.schedule, "sm_stores");
  EXPECT_NEAR(one.predicted_ce_drain_ms, one.predicted_sm_stores_ms, 1e-12);
  EXPECT_DOUBLE_EQ(one.predicted_stall_guided_us, one.predicted_stall_row_major_us);
  HostLinkRow many;
  many.config = {4096, 2, 24, 128};
  many.attention_row_major_ms = 0.15;
  many.remote_bytes = 6291456;
  advise_host_link_schedule(many, 132, link60);
  EXPECT_EQ(many.schedule, "copy_engine_drain");
  EXPECT_NEAR(many.predicted_stall_guided_us, (copy - 0.05) * 1e3, 1e-9);
  EXPECT_NEAR(many.predicted_stall_row_major_us, copy * 1e3, 1e-9);
  many.fused_sm_guided_ms = 0.26;
  many.fused_row_major_ms = 0.26;
  many.fused_ce_drain_ms = 0.2;
  finish_host_link_row(many);
  EXPECT_DOUBLE_EQ(many.fused_guided_ms, 0.2);
  EXPECT_DOUBLE_EQ(many.speedup_vs_row_major, 1.3);
  EXPECT_NEAR(many.predicted_speedup_vs_row_major, (0.15 + copy) / (0.1 + copy), 1e-12);
}

// The drain-time check of measured rows: each row's two drains against the predictions
// it carries and against this build's model, the copy rate from copy_GBps or, where a row
// has none, from its exchange after attention (its P - 1 copies back to back).
TEST(UlyssesHostLink, DrainPredictionsCheckedOnMeasuredRows) {
  burstgap::ModelParams link;
  link.drain_GBps = 60;
  const Problem p{2, 1, 4096, 24, 128};
  HostLinkRow r;
  r.config = {4096, 2, 24, 128};
  r.attention_row_major_ms = r.attention_owner_ms = 0.15;
  r.copy_op_us = 4;
  r.drain_chunk_blocks = 4;
  r.predicted_ce_drain_ms = 0.2;
  r.predicted_ce_owner_ms = 0.25;
  r.fused_ce_drain_ms = 0.22;
  r.fused_ce_owner_ms = 0.25;
  HostLinkRow old = r;  // no copy_GBps: the exchange moved the 6,291,456 bytes at 40 GB/s
  old.exchange_after_ms = 0.15 + 6291456 / 40e6;
  r.copy_GBps = 60;
  const DrainModelCheck c = check_drain_predictions({r, old}, link, 132);
  EXPECT_EQ(c.at_measurement.n, 4u);
  EXPECT_NEAR(c.at_measurement.median, 1.05, 1e-12);  // 1.1, 1.0, 1.1, 1.0
  EXPECT_NEAR(c.at_measurement_median_abs_rel_error, 0.05, 1e-12);
  std::vector<double> now;
  for (double rate : {60.0, 40.0}) {
    now.push_back(0.22 / predict_copy_engine_drain_ms(p, 0, 132, 0.15, link, 4, {0.004, rate}));
    now.push_back(0.25 / predict_copy_engine_drain_ms(p, 0, 132, 0.15, link, 0, {0.004, rate}));
  }
  EXPECT_NEAR(c.current.median, common::median(now), 1e-9);
  EXPECT_NEAR(c.current.min, *std::min_element(now.begin(), now.end()), 1e-9);
  EXPECT_NEAR(c.current.max, *std::max_element(now.begin(), now.end()), 1e-9);
  // Rows without a drain are left out; no row at all gives -1.
  HostLinkRow none;
  none.config = r.config;
  EXPECT_EQ(check_drain_predictions({none}, link, 132).current_median_abs_rel_error, -1);
}

// The drain in chunks, by hand: P = 2, S = 4096, H = 24, D = 128, rank 0, 132 CTAs,
// chunks of 4 row blocks (48 tiles each): owner 1's chunks end in rounds 0, 0, 1, 1 of 3,
// each 1,572,864 bytes plus the fixed cost of its two stream operations (wait, copy).
TEST(UlyssesHostLink, ChunkedDrainPredictionAndChoice) {
  burstgap::ModelParams link;
  link.drain_GBps = 60;
  const Problem p{2, 1, 4096, 24, 128};
  const double att = 0.15, r = att / 3, c = 1572864.0 / 60e6, op = 0.004, ops = 2 * op;
  double end = r + ops + c;
  end = std::max(end, r) + ops + c;
  end = std::max(end, 2 * r) + ops + c;
  end = std::max(end, 2 * r) + ops + c;
  EXPECT_NEAR(predict_copy_engine_drain_ms(p, 0, 132, att, link, 4, {op}), std::max(att, end), 1e-12);
  // One chunk per owner: the whole owner after round 1 (chunk_blocks = 16 is the same).
  EXPECT_NEAR(predict_copy_engine_drain_ms(p, 0, 132, att, link, 0, {op}), 2 * r + ops + 4 * c, 1e-12);
  EXPECT_DOUBLE_EQ(predict_copy_engine_drain_ms(p, 0, 132, att, link, 16, {op}),
                   predict_copy_engine_drain_ms(p, 0, 132, att, link, 0, {op}));
  // The choice: finer chunks start the copies a round earlier here; with a fixed cost per
  // copy of a whole round's time they never pay.
  const int chosen = choose_drain_chunk_blocks(p, 0, 132, att, link, {op});
  EXPECT_GT(chosen, 0);
  EXPECT_LT(predict_copy_engine_drain_ms(p, 0, 132, att, link, chosen, {op}),
            0.99 * predict_copy_engine_drain_ms(p, 0, 132, att, link, 0, {op}));
  for (int k = 1; k <= 16; k *= 2)
    EXPECT_LE(predict_copy_engine_drain_ms(p, 0, 132, att, link, chosen, {op}),
              predict_copy_engine_drain_ms(p, 0, 132, att, link, k, {op}) + 1e-12) << k;
  EXPECT_EQ(choose_drain_chunk_blocks(p, 0, 132, att, link, {r}), 0);
  // The advisor predicts the row's chunks and keeps one chunk per owner beside it.
  HostLinkRow row;
  row.config = {4096, 2, 24, 128};
  row.attention_row_major_ms = att;
  row.remote_bytes = 6291456;
  row.drain_chunk_blocks = 4;
  row.copy_op_us = op * 1e3;
  advise_host_link_schedule(row, 132, link);
  EXPECT_NEAR(row.predicted_ce_drain_ms, std::max(att, end), 1e-12);
  EXPECT_NEAR(row.predicted_ce_owner_ms, 2 * r + ops + 4 * c, 1e-12);
  EXPECT_EQ(row.schedule, "copy_engine_drain");
  // Attention measured in the drain's own order is what the drain is predicted from.
  row.attention_owner_ms = 0.3;
  advise_host_link_schedule(row, 132, link);
  EXPECT_NEAR(row.predicted_ce_owner_ms, 0.2 + ops + 4 * c, 1e-12);
  EXPECT_NEAR(row.predicted_sm_stores_ms, att + 6291456 / 60e6, 1e-12);
  // A measured copy rate replaces the link's drain rate for the copies (and only for them:
  // SM stores still drain at D); 0 keeps D.
  row.copy_GBps = 40;
  advise_host_link_schedule(row, 132, link);
  EXPECT_NEAR(row.predicted_ce_owner_ms, 0.2 + ops + 4 * 1572864.0 / 40e6, 1e-12);
  EXPECT_NEAR(row.predicted_sm_stores_ms, att + 6291456 / 60e6, 1e-12);
  EXPECT_NEAR(predict_copy_engine_drain_ms(p, 0, 132, att, link, 0, {op, 40}), 2 * r + ops + 4 * 1572864.0 / 40e6,
              1e-12);
  // At any copy rate the advisor's chunk is predicted no slower than one chunk per owner.
  for (double rate : {20.0, 40.0, 60.0, 120.0}) {
    const int k = choose_drain_chunk_blocks(p, 0, 132, att, link, {op, rate});
    EXPECT_LE(predict_copy_engine_drain_ms(p, 0, 132, att, link, k, {op, rate}),
              predict_copy_engine_drain_ms(p, 0, 132, att, link, 0, {op, rate}) + 1e-12)
        << rate;
  }
  burstgap::ModelParams no_rate;
  no_rate.drain_GBps = 0;
  EXPECT_THROW(predict_copy_engine_drain_ms(p, 0, 132, att, no_rate, 0, {op, 0}), common::Error);
  EXPECT_GT(predict_copy_engine_drain_ms(p, 0, 132, att, no_rate, 0, {op, 50}), att);
}
