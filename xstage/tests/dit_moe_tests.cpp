// CPU tests of the host side of the DiT MoE FFN on GPUs (xstage/dit/moe_plan.cpp):
// the presets meet the fused MoE kernel's shapes and others are refused in one
// line; expert shards per rank; every rank's routing, the global layout and a
// valid Interleaved order from the router logits of all tokens; and the whole
// plumbing (shards + routing + layout) through the MoE layer's host reference
// equals the DiT reference's MoE FFN, the same for P = 1, 2 and 4.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <tuple>

#include "common/testing.hpp"
#include "xstage/dit/dit.hpp"

using namespace xstage;
using namespace xstage::dit;
using common::error_of;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::vector<float> normal_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// logits [n, E] = h [n, C] · W_routerᵀ, fp32 as the reference computes them.
std::vector<float> router_logits(const Config& c, const Weights& w, int block, const std::vector<float>& h, int64_t n) {
  const auto& W = w.at(block_param(block, "moe.router.weight")).data;
  std::vector<float> out(size_t(n * c.experts));
  for (int64_t i = 0; i < n; ++i)
    for (int e = 0; e < c.experts; ++e) {
      float acc = 0;
      for (int64_t k = 0; k < c.hidden; ++k) acc += h[size_t(i * c.hidden + k)] * W[size_t(e * c.hidden + k)];
      out[size_t(i * c.experts + e)] = acc;
    }
  return out;
}

std::vector<moe::bf16_bits> to_bf16(const std::vector<float>& v) {
  std::vector<moe::bf16_bits> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = moe::to_bf16(v[i]);
  return b;
}

}  // namespace

TEST(DitMoePlan, PresetsMeetTheFusedKernelShapes) {
  for (int P : {1, 2, 4}) EXPECT_NO_THROW(validate(preset("tiny-moe"), {512, P, 1, 0}, true)) << P;
  for (int P : {1, 2, 4, 8}) EXPECT_NO_THROW(validate(preset("dit-moe"), {4096, P, 1, 4}, true)) << P;
  const moe::Problem p = moe_problem(preset("dit-moe"), 4096, 2);
  EXPECT_EQ(moe::describe(p), "P2 T2048 E16 k2 h3072 I3072");
  EXPECT_EQ(moe::route::max_recv_rows(p), 2 * 2048 * 2);                                // k = 2 <= 8 experts per rank
  EXPECT_EQ(moe::route::max_recv_rows(moe_problem(preset("tiny-moe"), 512, 4)), 512);   // one expert per rank: one row per token
  Config narrow = preset("tiny-moe");
  narrow.heads = 2;
  narrow.hidden = 128;
  EXPECT_NO_THROW(validate(narrow, {512, 1, 1, 0}, false));  // the CPU reference takes any width
  EXPECT_TRUE(contains(error_of([&] { validate(narrow, {512, 1, 1, 0}, true); }),
                       "hidden 128 is not a multiple of 256 (the fused MoE kernel's L2 tile width)"));
  Config inter = preset("tiny-moe");
  inter.moe_inter = 192;
  EXPECT_TRUE(contains(error_of([&] { validate(inter, {512, 1, 1, 0}, true); }),
                       "moe_inter 192 is not a multiple of 128 (the fused MoE kernel's L1 tile width)"));
  EXPECT_TRUE(contains(error_of([&] { moe_problem(preset("tiny"), 512, 1); }), "has no MoE FFN"));
}

TEST(DitMoePlan, ExpertShardsConcatenateToTheTensor) {
  const Config c = preset("tiny-moe");
  const Weights w = random_weights(c, 1, 3);
  EXPECT_TRUE(is_expert_param("blocks.0.moe.w1"));
  EXPECT_TRUE(is_expert_param("blocks.12.moe.w2"));
  EXPECT_FALSE(is_expert_param("blocks.0.moe.router.weight"));
  EXPECT_FALSE(is_expert_param("blocks.0.mlp.fc1.weight"));
  for (const char* name : {"blocks.0.moe.w1", "blocks.0.moe.w2"}) {
    const Tensor& t = w.at(name);
    const size_t per_expert = t.data.size() / size_t(c.experts);
    for (int P : {1, 2, 4}) {
      std::vector<float> all;
      for (int r = 0; r < P; ++r) {
        const auto s = expert_shard(t, P, r);
        ASSERT_EQ(s.size(), per_expert * size_t(c.experts / P)) << name << " P " << P;
        // Rank r's local expert j is global expert r * E/P + j.
        const size_t e = size_t(r * (c.experts / P));
        EXPECT_TRUE(std::equal(s.begin(), s.begin() + per_expert, t.data.begin() + e * per_expert)) << name;
        all.insert(all.end(), s.begin(), s.end());
      }
      EXPECT_EQ(all, t.data) << name << " P " << P;
    }
  }
  EXPECT_TRUE(contains(error_of([&] { expert_shard(w.at("blocks.0.moe.w1"), 3, 0); }),
                       "4 experts does not shard over P = 3"));
}

TEST(DitMoePlan, EveryRankRoutesAllTokensTheSameWay) {
  const Config c = preset("tiny-moe");
  const int64_t N = 512;
  const auto logits = normal_values(size_t(N * c.experts), 7);
  const moe::Routing whole = moe::route_from_logits(logits, int(N), c.experts, c.topk);
  for (int P : {1, 2, 4}) {
    const moe::Problem p = moe_problem(c, N, P);
    const MoeRoute route = moe_route(p, logits);
    ASSERT_EQ(route.routing.size(), size_t(P));
    for (int s = 0; s < P; ++s) {  // rank s's slice routes as those tokens do in one piece
      const size_t off = size_t(s) * p.tokens_per_rank * c.topk, n = size_t(p.tokens_per_rank) * c.topk;
      const moe::Routing& part = route.routing[size_t(s)];
      EXPECT_TRUE(std::equal(whole.expert.begin() + off, whole.expert.begin() + off + n, part.expert.begin()));
      EXPECT_TRUE(std::equal(whole.weight.begin() + off, whole.weight.begin() + off + n, part.weight.begin()));
    }
    EXPECT_NO_THROW(moe::check_layout(route.layout, route.routing));
    EXPECT_LE(route.layout.max_rows(), moe::route::max_recv_rows(p));
    for (int r = 0; r < P; ++r) {
      const auto order = moe_order(p, route, r, 132, burstgap::example_params("peer"));
      const auto tiles = moe::build_tiles(p, route.layout.ranks[size_t(r)]);
      EXPECT_NO_THROW(moe::check_order(tiles, order)) << P << " " << r;
      // --moe-raster 1: the m-major tiles, the same items in another order.
      const auto mmajor = moe_order(p, route, r, 132, burstgap::example_params("peer"), 1);
      EXPECT_NO_THROW(moe::check_order(tiles, mmajor)) << P << " " << r;
      auto a = order, b = mmajor;
      auto less = [](const moe::WorkItem& x, const moe::WorkItem& y) {
        return std::tie(x.kind, x.expert, x.m_block, x.n_block) < std::tie(y.kind, y.expert, y.m_block, y.n_block);
      };
      std::sort(a.begin(), a.end(), less);
      std::sort(b.begin(), b.end(), less);
      EXPECT_EQ(a, b);
    }
  }
  EXPECT_TRUE(contains(error_of([&] { moe_route(moe_problem(c, N, 2), {1.0f}); }), "1 router logits for 2 ranks"));
}

// What the GPU path feeds the fused kernel, run through the MoE layer's host
// reference (bf16 inputs, weights, H and output): the DiT reference's MoE FFN
// (fp32) within bf16 rounding, and bitwise the same for every P.
TEST(DitMoePlan, ExpertParallelPlumbingMatchesTheReferenceFfn) {
  const Config c = preset("tiny-moe");
  const int64_t N = 128, C = c.hidden;
  const Weights w = random_weights(c, 1, 11);
  const auto h = normal_values(size_t(N * C), 12);
  const auto want = reference_moe_ffn(c, w, 0, h, N);
  const auto logits = router_logits(c, w, 0, h, N);
  std::vector<float> first;
  for (int P : {1, 2, 4}) {
    const moe::Problem p = moe_problem(c, N, P);
    const MoeRoute route = moe_route(p, logits);
    moe::Weights mw;
    std::vector<std::vector<moe::bf16_bits>> x;
    for (int r = 0; r < P; ++r) {
      mw.w1.push_back(to_bf16(expert_shard(w.at("blocks.0.moe.w1"), P, r)));
      mw.w2.push_back(to_bf16(expert_shard(w.at("blocks.0.moe.w2"), P, r)));
      x.push_back(to_bf16({h.begin() + r * p.tokens_per_rank * C, h.begin() + (r + 1) * p.tokens_per_rank * C}));
    }
    const auto out = moe::reference_forward(p, route.routing, route.layout, mw, x);
    std::vector<float> got;
    for (const auto& o : out) got.insert(got.end(), o.begin(), o.end());
    ASSERT_EQ(got.size(), want.size());
    double num = 0, den = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
      den += double(want[i]) * want[i];
    }
    const double rel = std::sqrt(num / den);
    std::printf("P %d: EP MoE (bf16) vs the DiT MoE FFN (fp32): rel L2 %.2e\n", P, rel);
    EXPECT_LT(rel, 1e-2) << "P " << P;  // bf16 (2^-8) rounding of x, W1, W2, H and out; a wrong expert gives O(1)
    EXPECT_GT(den, 1.0);
    if (P == 1) first = got;
    else EXPECT_EQ(got, first) << "P " << P;
  }
}
