// CPU tests of the attention host logic: shape validation, the launch config,
// the tile scheduler's order, the masking arithmetic and the fp64 reference.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <numeric>
#include <set>

#include "common/check.hpp"
#include "xstage/attention/attention.hpp"
#include "xstage/bench/timing.hpp"

using namespace xstage::attention;
using ::testing::HasSubstr;

namespace {

alignas(16) uint16_t g_buf[1 << 12];

FwdArgs valid_args(int64_t D = 64) {
  FwdArgs a;
  a.q = a.k = a.v = a.o = Tensor4::bshd(g_buf, 1, 16, 2, D);
  return a;
}

std::string refusal(const FwdArgs& a) {
  try {
    validate(a);
  } catch (const common::Error& e) {
    return e.what();
  }
  return "accepted";
}

}  // namespace

TEST(AttentionValidate, AcceptsSupportedShapes) {
  for (int64_t D : {64, 128}) {
    const Problem p = validate(valid_args(D));
    EXPECT_EQ(p.D, D);
    EXPECT_FLOAT_EQ(p.scale, 1.f / std::sqrt(static_cast<float>(D)));
  }
  FwdArgs a = valid_args();
  a.k.S = a.v.S = 5;  // Skv != Sq is fine
  a.softmax_scale = 0.5f;
  const Problem p = validate(a);
  EXPECT_EQ(p.Skv, 5);
  EXPECT_FLOAT_EQ(p.scale, 0.5f);
}

TEST(AttentionValidate, RefusesWithClearMessages) {
  EXPECT_THAT(refusal(valid_args(96)), HasSubstr("head dim D = 96 is not supported"));
  EXPECT_THAT(refusal(valid_args(256)), HasSubstr("supported: 64, 128"));
  FwdArgs a = valid_args();
  a.k.stride_s = 2 * 64 + 4;
  EXPECT_THAT(refusal(a), HasSubstr("K sequence stride is 132 elements; it must be a multiple of 8"));
  a = valid_args();
  a.o.stride_h = 68;
  EXPECT_THAT(refusal(a), HasSubstr("O head stride"));
  a = valid_args();
  a.v.dtype = DType::fp16;
  EXPECT_THAT(refusal(a), HasSubstr("V is fp16, but the kernel takes bf16 tensors only"));
  a = valid_args();
  a.o.dtype = DType::fp32;
  EXPECT_THAT(refusal(a), HasSubstr("O is fp32"));
  a = valid_args();
  a.q.stride_d = 2;
  EXPECT_THAT(refusal(a), HasSubstr("must be contiguous"));
  a = valid_args();
  a.k.data = reinterpret_cast<char*>(g_buf) + 8;
  EXPECT_THAT(refusal(a), HasSubstr("not 16-byte aligned"));
  a = valid_args();
  a.k.H = 1;
  a.v.H = 1;
  EXPECT_THAT(refusal(a), HasSubstr("head counts differ"));
  a = valid_args();
  a.v.S = 3;
  EXPECT_THAT(refusal(a), HasSubstr("K has 16 rows but V has 3"));
  a = valid_args();
  a.q.S = 0;
  EXPECT_THAT(refusal(a), HasSubstr("empty shape"));
  a = valid_args();
  a.q.data = nullptr;
  EXPECT_THAT(refusal(a), HasSubstr("no data pointer"));
  // An extent-1 dimension may have any stride.
  a = valid_args();
  a.q.stride_b = 3;
  EXPECT_EQ(refusal(a), "accepted");
}

TEST(AttentionConfig, ChoosesByHeadDimAndCausality) {
  Problem p;
  p.B = 2, p.Sq = 1000, p.Skv = 1000, p.H = 3, p.D = 128;
  FwdConfig c = choose_config(p, 132);
  EXPECT_EQ(c.block_m, 128);
  EXPECT_EQ(c.block_n, 128);
  EXPECT_EQ(c.stages, 2);
  EXPECT_EQ(c.threads, 384);
  EXPECT_EQ(c.tiles.m_blocks, 8);
  EXPECT_EQ(c.tiles.count(), 8 * 3 * 2);
  EXPECT_EQ(c.grid, 48);  // fewer tiles than SMs
  EXPECT_EQ(c.tiles.order, TileOrder::head_major);
  EXPECT_LE(c.smem_bytes, 227 * 1024);
  p.D = 64;
  p.causal = true;
  c = choose_config(p, 132, FwdOptions{5});
  EXPECT_EQ(c.stages, 4);
  EXPECT_EQ(c.grid, 5);
  EXPECT_EQ(c.tiles.order, TileOrder::longest_first);
  EXPECT_LE(c.smem_bytes, 227 * 1024);
  p.Sq = p.Skv = 65536, p.H = 40, p.B = 1;
  EXPECT_EQ(choose_config(p, 132).grid, 132);
  EXPECT_THAT(describe(c), HasSubstr("longest_first"));
}

TEST(AttentionScheduler, EveryTileExactlyOnce) {
  for (TileOrder order : {TileOrder::head_major, TileOrder::longest_first})
    for (int group : {0, 1, 2, 3, 5, 9})
      for (bool snake : {false, true})
        for (int grid : {1, 3, 7, 132}) {
          if (order == TileOrder::head_major && group) continue;
          TileSpace sp{9, 5, 2, order, group};
          StaticPersistentScheduler sched{sp, snake};
          std::set<std::tuple<int, int, int>> seen;
          for (int cta = 0; cta < grid; ++cta)
            for (WorkTile w = sched.initial_work(cta, grid); w.valid; w = sched.next_work(w, grid)) {
              EXPECT_GE(w.m_block, 0);
              EXPECT_LT(w.m_block, 9);
              EXPECT_TRUE(seen.insert({w.m_block, w.head, w.batch}).second) << "tile visited twice";
            }
          EXPECT_EQ(static_cast<int64_t>(seen.size()), sp.count()) << "group " << group << " snake " << snake;
        }
}

TEST(AttentionScheduler, HeadMajorKeepsOneHeadTogether) {
  TileSpace sp{4, 3, 2, TileOrder::head_major};
  for (int64_t i = 0; i < sp.count(); ++i) {
    const WorkTile w = sp.tile(i);
    EXPECT_EQ(w.m_block, i % 4);
    EXPECT_EQ(w.head, (i / 4) % 3);
    EXPECT_EQ(w.batch, i / 12);
  }
  EXPECT_FALSE(sp.tile(sp.count()).valid);
}

TEST(AttentionScheduler, LongestFirstIsNonIncreasingWorkAndBalances) {
  TileSpace sp{32, 6, 1, TileOrder::longest_first, 0};
  int prev = 1 << 30;
  for (int64_t i = 0; i < sp.count(); ++i) {
    const int work = sp.tile(i).m_block + 1;  // causal work grows with m_block
    EXPECT_LE(work, prev);
    prev = work;
  }
  // Round-robin over 20 CTAs: the busiest CTA carries at most ~15% more than the mean.
  const int grid = 20;
  StaticPersistentScheduler sched{sp};
  std::vector<int> load(grid, 0);
  for (int cta = 0; cta < grid; ++cta)
    for (WorkTile w = sched.initial_work(cta, grid); w.valid; w = sched.next_work(w, grid)) load[cta] += w.m_block + 1;
  const double mean = std::accumulate(load.begin(), load.end(), 0.0) / grid;
  EXPECT_LE(*std::max_element(load.begin(), load.end()), 1.15 * mean);
}

TEST(AttentionMask, BlockCountsAndMaskFlagsAgreeWithBruteForce) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    const int Sq = 1 + static_cast<int>(rng() % 700), Skv = 1 + static_cast<int>(rng() % 700);
    const bool causal = rng() % 2;
    const MaskInfo m{Sq, Skv, causal};
    const int bm = 128, bn = 128;
    for (int m0 = 0; m0 < Sq; m0 += bm) {
      // Brute force: the highest key any valid row of the tile sees.
      int last_needed = -1;
      for (int i = m0; i < std::min(m0 + bm, Sq); ++i)
        for (int j = Skv - 1; j >= 0; --j)
          if (m.visible(i, j)) {
            last_needed = std::max(last_needed, j);
            break;
          }
      const int expect_blocks = last_needed < 0 ? 0 : last_needed / bn + 1;
      ASSERT_EQ(m.n_blocks(m0, bm, bn), expect_blocks) << "Sq " << Sq << " Skv " << Skv << " causal " << causal << " m0 " << m0;
      for (int r0 = m0; r0 < m0 + bm; r0 += 64)
        for (int n = 0; n < expect_blocks; ++n) {
          bool all_visible = true;
          for (int i = r0; i < r0 + 64 && all_visible; ++i)
            for (int j = n * bn; j < (n + 1) * bn; ++j)
              if (!m.visible(i, j)) {
                all_visible = false;
                break;
              }
          // needs_mask may be conservative, never wrong: false implies all visible.
          if (!m.needs_mask(n, bn, r0)) ASSERT_TRUE(all_visible) << "n " << n << " r0 " << r0;
        }
    }
  }
}

TEST(AttentionMask, BottomRightCausalConvention) {
  const MaskInfo m{4, 6, true};  // query i sees keys j <= i + 2
  EXPECT_TRUE(m.visible(0, 2));
  EXPECT_FALSE(m.visible(0, 3));
  EXPECT_TRUE(m.visible(3, 5));
  const MaskInfo few{6, 2, true};  // queries 0..3 see nothing
  EXPECT_FALSE(few.visible(3, 0));
  EXPECT_TRUE(few.visible(4, 0));
  EXPECT_EQ(few.n_blocks(0, 4, 128), 0);
}

TEST(AttentionReference, ClosedForms) {
  // One key: O = V exactly, LSE = q·k·scale.
  {
    const std::vector<float> q = {1, 2}, k = {3, -1}, v = {0.5f, -4};
    const auto r = reference_fwd(q, k, v, 1, 1, 1, 1, 2, false, 0.5);
    EXPECT_DOUBLE_EQ(r.o[0], 0.5);
    EXPECT_DOUBLE_EQ(r.o[1], -4);
    EXPECT_NEAR(r.lse[0], (3 - 2) * 0.5, 1e-12);
  }
  // Zero queries: uniform weights, O = mean of visible V, LSE = log(#visible).
  {
    const int S = 5, D = 3;
    std::vector<float> q(S * D, 0.f), k(S * D), v(S * D);
    for (int i = 0; i < S * D; ++i) k[i] = 0.1f * i, v[i] = static_cast<float>(i % 7);
    const auto full = reference_fwd(q, k, v, 1, S, S, 1, D, false, 1.0);
    const auto causal = reference_fwd(q, k, v, 1, S, S, 1, D, true, 1.0);
    for (int i = 0; i < S; ++i)
      for (int d = 0; d < D; ++d) {
        double all = 0, prefix = 0;
        for (int j = 0; j < S; ++j) all += v[j * D + d];
        for (int j = 0; j <= i; ++j) prefix += v[j * D + d];
        EXPECT_NEAR(full.o[i * D + d], all / S, 1e-12);
        EXPECT_NEAR(causal.o[i * D + d], prefix / (i + 1), 1e-12);
      }
    for (int i = 0; i < S; ++i) {
      EXPECT_NEAR(full.lse[i], std::log(S), 1e-12);
      EXPECT_NEAR(causal.lse[i], std::log(i + 1), 1e-12);
    }
  }
  // Rows that see no key: O = 0, LSE = -inf.
  {
    std::vector<float> q(3 * 2, 1.f), k(1 * 2, 1.f), v(1 * 2, 2.f);
    const auto r = reference_fwd(q, k, v, 1, 3, 1, 1, 2, true, 1.0);
    EXPECT_EQ(r.o[0], 0.0);
    EXPECT_TRUE(std::isinf(r.lse[0]) && r.lse[0] < 0);
    EXPECT_DOUBLE_EQ(r.o[2 * 2], 2.0);
  }
}

TEST(AttentionReference, FlopCount) {
  Problem p;
  p.B = 1, p.Sq = p.Skv = 1024, p.H = 24, p.D = 128;
  EXPECT_DOUBLE_EQ(fwd_flops(p), 4.0 * 1024 * 1024 * 128 * 24);
  p.causal = true;
  EXPECT_DOUBLE_EQ(fwd_flops(p), 2.0 * 1024 * 1024 * 128 * 24);
}

TEST(AttentionBf16, RoundTripAndRounding) {
  for (float f : {0.f, 1.f, -2.5f, 3.140625f, 65536.f, -0.0078125f}) EXPECT_EQ(bf16_bits_to_float(float_to_bf16_bits(f)), f);
  EXPECT_EQ(float_to_bf16_bits(1.0f + 1.0f / 256), 0x3F80);      // tie -> even
  EXPECT_EQ(float_to_bf16_bits(1.0f + 3.0f / 256), 0x3F82);      // tie -> even (up)
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(NAN))));
  EXPECT_TRUE(std::isinf(bf16_bits_to_float(float_to_bf16_bits(INFINITY))));
}

TEST(AttentionScheduler, SnakeRoundsEvenOutLongestFirst) {
  TileSpace sp{16, 6, 1, TileOrder::longest_first, 0};
  const int grid = 20;
  auto worst = [&](bool snake) {
    StaticPersistentScheduler sched{sp, snake};
    std::vector<int> load(grid, 0);
    for (int cta = 0; cta < grid; ++cta)
      for (WorkTile w = sched.initial_work(cta, grid); w.valid; w = sched.next_work(w, grid)) {
        EXPECT_EQ(sched.cta_of(w, grid), cta);
        load[cta] += w.m_block + 1;
      }
    return *std::max_element(load.begin(), load.end()) / (std::accumulate(load.begin(), load.end(), 0.0) / grid);
  };
  EXPECT_LT(worst(true), worst(false));
  EXPECT_LT(worst(true), 1.05);
}

TEST(AttentionScheduler, HeadSectionsAreLongestFirstInside) {
  TileSpace sp{4, 5, 1, TileOrder::longest_first, 2};  // sections: heads {0,1}, {2,3}, {4}
  std::vector<std::pair<int, int>> got;  // (head, m_block)
  for (int64_t i = 0; i < sp.count(); ++i) got.push_back({sp.tile(i).head, sp.tile(i).m_block});
  const std::vector<std::pair<int, int>> expect = {
      {0, 3}, {1, 3}, {0, 2}, {1, 2}, {0, 1}, {1, 1}, {0, 0}, {1, 0},
      {2, 3}, {3, 3}, {2, 2}, {3, 2}, {2, 1}, {3, 1}, {2, 0}, {3, 0},
      {4, 3}, {4, 2}, {4, 1}, {4, 0}};
  EXPECT_EQ(got, expect);
}

TEST(AttentionConfig, VariantsFollowOptions) {
  Problem p;
  p.B = 1, p.Sq = p.Skv = 65536, p.H = 24, p.D = 64, p.causal = true;
  FwdOptions o;
  FwdConfig c = choose_config(p, 132, o);
  EXPECT_FALSE(c.snake);  // defaults are the measured configuration
  EXPECT_FALSE(c.pingpong);
  EXPECT_EQ(c.tiles.group_heads, 0);
  o.snake = 1;
  EXPECT_TRUE(choose_config(p, 132, o).snake);
  o.pingpong = 1;
  o.head_group = 3;
  c = choose_config(p, 132, o);
  EXPECT_TRUE(c.pingpong);
  EXPECT_EQ(c.tiles.group_heads, 3);
  o.head_group = -2;  // about 8 grid rounds per section: ceil(8 * 132 / 512) = 3 heads
  EXPECT_EQ(choose_config(p, 132, o).tiles.group_heads, 3);
  o.pingpong = 0;
  EXPECT_FALSE(choose_config(p, 132, o).pingpong);
  o.snake = 0;
  EXPECT_FALSE(choose_config(p, 132, o).snake);
}

// The benchmarks' sampling: batch sizes from the warm-up estimate, and variants
// compared with one another sampled in turns.
TEST(BenchTiming, InterleavedSamplingTakesTurnsAndDividesByTheBatch) {
  std::vector<int> calls, batch;  // after the warm-ups: which variant, how many launches
  double drift = 1.0;             // the card slows down 1 % per sample over the run
  int warmups = 0;
  auto fake = [&](int v, double launch_ms) -> std::function<double(int)> {
    return [&, v, launch_ms](int n) {
      if (warmups < 6) {  // two warm-ups of each of the three variants come first
        ++warmups;
        return n * launch_ms;
      }
      calls.push_back(v);
      batch.push_back(n);
      const double t = n * launch_ms * drift;
      drift *= 1.01;
      return t;
    };
  };
  std::vector<std::function<double(int)>> timed = {fake(0, 0.5), fake(1, 0.5), fake(2, 4.0)};
  const auto got = xstage::sample_interleaved_ms(timed, 2, 5);
  ASSERT_EQ(got.size(), 3u);
  ASSERT_EQ(calls.size(), 15u);
  for (std::size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i], int(i % 3)) << i;                // 0 1 2 0 1 2 ...
    EXPECT_EQ(batch[i], calls[i] == 2 ? 1 : 4) << i;     // ~2 ms per sample: 4 x 0.5 ms, 1 x 4 ms
  }
  for (const auto& v : got) {
    ASSERT_EQ(v.size(), 5u);
    EXPECT_TRUE(std::is_sorted(v.begin(), v.end()));
  }
  // Per launch, not per batch; two equal variants differ by one turn's drift only
  // (sampled one after the other, the second would read ~5 % slower).
  EXPECT_NEAR(got[0][0], 0.5, 1e-12);
  EXPECT_NEAR(got[2][0], 4.0 * 1.01 * 1.01, 1e-9);
  const double ratio = xstage::median_of_sorted(got[1]) / xstage::median_of_sorted(got[0]);
  EXPECT_NEAR(ratio, 1.01, 1e-9);
}

// is_last (the fused kernel's per-CTA signal test, index arithmetic only) agrees with
// next_work for every tile, plain and snake rounds, grids below, at and above the tiles.
TEST(TileScheduler, IsLastAgreesWithNextWork) {
  for (bool snake : {false, true})
    for (int grid : {1, 5, 13, 64, 200}) {
      TileSpace t;
      t.m_blocks = 16;
      t.heads = 4;
      t.batches = 1;
      const StaticPersistentScheduler s{t, snake};
      int64_t lasts = 0;
      for (int cta = 0; cta < grid; ++cta)
        for (WorkTile w = s.initial_work(cta, grid); w.valid; w = s.next_work(w, grid)) {
          EXPECT_EQ(s.is_last(w, grid), !s.next_work(w, grid).valid) << "snake " << snake << " grid " << grid;
          lasts += s.is_last(w, grid);
        }
      EXPECT_EQ(lasts, std::min<int64_t>(grid, t.count())) << "snake " << snake << " grid " << grid;
    }
}
