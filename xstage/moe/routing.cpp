// Problem validation, routing (from logits and synthetic).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "common/check.hpp"
#include "xstage/moe/moe.hpp"
#include "xstage/moe/topk.hpp"

namespace xstage::moe {

std::string describe(const Problem& p) {
  return fmt::format("P{} T{} E{} k{} h{} I{}", p.ranks, p.tokens_per_rank, p.experts, p.topk, p.hidden,
                     p.intermediate);
}

void validate(const Problem& p, int visible_gpus) {
  XS_ASSERT(p.ranks >= 1, "moe: ranks must be >= 1 (got {})", p.ranks);
  XS_ASSERT(visible_gpus < 0 || p.ranks <= visible_gpus,
            "moe: {} ranks need {} GPUs but only {} are visible (one rank per GPU)", p.ranks, p.ranks, visible_gpus);
  XS_ASSERT(p.tokens_per_rank >= 1, "moe: tokens_per_rank must be >= 1 (got {})", p.tokens_per_rank);
  XS_ASSERT(p.experts >= 1, "moe: experts must be >= 1 (got {})", p.experts);
  XS_ASSERT(p.topk >= 1 && p.topk <= p.experts, "moe: top-k must be in 1..experts (got top-k {} with {} experts)",
            p.topk, p.experts);
  XS_ASSERT(p.experts % p.ranks == 0, "moe: experts ({}) must be divisible by the EP size ({} ranks)", p.experts,
            p.ranks);
  XS_ASSERT(p.hidden >= kHiddenQuantum && p.hidden % kHiddenQuantum == 0,
            "moe: hidden ({}) must be a positive multiple of the L2 tile width ({})", p.hidden, kHiddenQuantum);
  XS_ASSERT(p.intermediate >= kInterQuantum && p.intermediate % kInterQuantum == 0,
            "moe: intermediate ({}) must be a positive multiple of the L1 tile width ({})", p.intermediate,
            kInterQuantum);
  // Row indices are int32 in the kernel: every rank's worst case must fit.
  const double worst_rows = double(p.ranks) * p.tokens_per_rank * p.topk;
  XS_ASSERT(worst_rows * std::max(p.hidden, p.intermediate) < 2147483647.0 * 8,
            "moe: {} is too large for 32-bit row indices", describe(p));
}

namespace {

// Every token through topk_softmax_token (xstage/moe/topk.hpp). K > 0: k = K, the
// scratch in registers; K = 0: any k.
template <int K>
void topk_softmax(const float* logits, int tokens, int experts, Routing& r) {
  const int k = K > 0 ? K : r.topk;
  constexpr int kCap = K > 0 ? K : 1;
  float val_fixed[kCap];
  int idx_fixed[kCap];
  double ex_fixed[kCap];
  std::vector<float> val_any(K > 0 ? 0 : k);
  std::vector<int> idx_any(K > 0 ? 0 : k);
  std::vector<double> ex_any(K > 0 ? 0 : k);
  float* val = K > 0 ? val_fixed : val_any.data();
  int* idx = K > 0 ? idx_fixed : idx_any.data();
  double* ex = K > 0 ? ex_fixed : ex_any.data();
  for (int t = 0; t < tokens; ++t)
    topk_softmax_token(logits + std::size_t(t) * experts, experts, k, val, idx, ex, &r.expert[std::size_t(t) * k],
                       &r.weight[std::size_t(t) * k]);
}

}  // namespace

Routing route_from_logits(const std::vector<float>& logits, int tokens, int experts, int topk) {
  XS_ASSERT(tokens >= 0 && experts >= 1, "route_from_logits: bad sizes (tokens {}, experts {})", tokens, experts);
  XS_ASSERT(topk >= 1 && topk <= experts, "route_from_logits: top-k must be in 1..experts (got {} of {})", topk,
            experts);
  XS_ASSERT(logits.size() == std::size_t(tokens) * experts, "route_from_logits: {} logits for [{}, {}]",
            logits.size(), tokens, experts);
  Routing r{tokens, topk, std::vector<int>(std::size_t(tokens) * topk), std::vector<float>(std::size_t(tokens) * topk)};
  for (std::size_t i = 0; i < logits.size(); ++i)
    XS_ASSERT(std::isfinite(logits[i]), "route_from_logits: logit [{}, {}] is not finite", i / experts, i % experts);
  switch (topk) {  // top-k sizes up to 8 get registers (the DiT routes every block on the host)
    case 1: topk_softmax<1>(logits.data(), tokens, experts, r); break;
    case 2: topk_softmax<2>(logits.data(), tokens, experts, r); break;
    case 3: topk_softmax<3>(logits.data(), tokens, experts, r); break;
    case 4: topk_softmax<4>(logits.data(), tokens, experts, r); break;
    case 5: topk_softmax<5>(logits.data(), tokens, experts, r); break;
    case 6: topk_softmax<6>(logits.data(), tokens, experts, r); break;
    case 7: topk_softmax<7>(logits.data(), tokens, experts, r); break;
    case 8: topk_softmax<8>(logits.data(), tokens, experts, r); break;
    default: topk_softmax<0>(logits.data(), tokens, experts, r); break;
  }
  return r;
}

namespace {

// The experts in a seeded order.
std::vector<int> seeded_permutation(int experts, std::mt19937_64& rng) {
  std::vector<int> perm(experts);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  return perm;
}

// One slot's gate weight before normalisation (0.05 + U(0, 1), seeded), added to `sum`;
// normalise_gates then divides a token's k weights by it.
void draw_gate(std::mt19937_64& rng, float& w, double& sum) {
  const double g = 0.05 + std::uniform_real_distribution<double>(0, 1)(rng);
  w = static_cast<float>(g);
  sum += g;
}
void normalise_gates(float* w, int topk, double sum) {
  for (int j = 0; j < topk; ++j) w[j] = static_cast<float>(w[j] / sum);
}

std::vector<Routing> balanced_routing(const Problem& p, std::mt19937_64& rng) {
  const std::vector<int> perm = seeded_permutation(p.experts, rng);
  std::vector<Routing> out;
  for (int r = 0; r < p.ranks; ++r) {
    Routing rt{p.tokens_per_rank, p.topk, std::vector<int>(std::size_t(p.tokens_per_rank) * p.topk),
               std::vector<float>(std::size_t(p.tokens_per_rank) * p.topk)};
    for (int t = 0; t < p.tokens_per_rank; ++t) {
      const std::size_t first = std::size_t(t) * p.topk;
      const std::int64_t g = (std::int64_t(r) * p.tokens_per_rank + t) * p.topk;
      double sum = 0;
      for (int j = 0; j < p.topk; ++j) {
        rt.expert[first + j] = perm[std::size_t((g + j) % p.experts)];
        draw_gate(rng, rt.weight[first + j], sum);
      }
      normalise_gates(&rt.weight[first], p.topk, sum);
    }
    out.push_back(std::move(rt));
  }
  return out;
}

}  // namespace

std::vector<Routing> synthetic_routing(const Problem& p, const SyntheticRouting& s) {
  validate(p);
  XS_ASSERT(s.zipf >= 0 && std::isfinite(s.zipf), "synthetic routing: zipf must be >= 0 (got {})", s.zipf);
  XS_ASSERT(s.same_rank >= 0 && s.same_rank <= 1, "synthetic routing: same_rank must be in [0, 1] (got {})",
            s.same_rank);
  XS_ASSERT(s.empty_experts >= 0 && p.experts - s.empty_experts >= p.topk,
            "synthetic routing: {} empty experts leave fewer than top-k {} of {} experts", s.empty_experts, p.topk,
            p.experts);
  XS_ASSERT(!s.balanced || (s.zipf == 0 && s.empty_experts == 0 && s.same_rank == 0),
            "synthetic routing: balanced routing takes no zipf, empty experts or same-rank picks");
  std::mt19937_64 rng(s.seed * 0x9E3779B97F4A7C15ull + 17);
  if (s.balanced) return balanced_routing(p, rng);
  // Popularity: a seeded permutation of experts gets weights 1/(i+1)^zipf; the
  // last `empty_experts` of the permutation get weight 0.
  const std::vector<int> perm = seeded_permutation(p.experts, rng);
  std::vector<double> pop(p.experts, 0.0);
  for (int i = 0; i < p.experts - s.empty_experts; ++i) pop[perm[i]] = 1.0 / std::pow(i + 1.0, s.zipf);
  const int epr = p.experts_per_rank();

  std::vector<Routing> out;
  std::uniform_real_distribution<double> u01(0, 1);
  for (int r = 0; r < p.ranks; ++r) {
    Routing rt{p.tokens_per_rank, p.topk, std::vector<int>(std::size_t(p.tokens_per_rank) * p.topk),
               std::vector<float>(std::size_t(p.tokens_per_rank) * p.topk)};
    for (int t = 0; t < p.tokens_per_rank; ++t) {
      std::vector<double> w = pop;
      double wsum = 0;
      for (int j = 0; j < p.topk; ++j) {
        // Same-rank pick: restrict to slot 0's rank while it still has candidates.
        std::vector<double> cand = w;
        if (j > 0 && u01(rng) < s.same_rank) {
          const int rk = rt.expert[std::size_t(t) * p.topk] / epr;
          double in_rank = 0;
          for (int e = rk * epr; e < (rk + 1) * epr; ++e) in_rank += w[e];
          if (in_rank > 0)
            for (int e = 0; e < p.experts; ++e)
              if (e / epr != rk) cand[e] = 0;
        }
        std::discrete_distribution<int> pick(cand.begin(), cand.end());
        const int e = pick(rng);
        w[e] = 0;
        rt.expert[std::size_t(t) * p.topk + j] = e;
        draw_gate(rng, rt.weight[std::size_t(t) * p.topk + j], wsum);
      }
      normalise_gates(&rt.weight[std::size_t(t) * p.topk], p.topk, wsum);
    }
    out.push_back(std::move(rt));
  }
  return out;
}

void validate(const Problem& p, const std::vector<Routing>& routing) {
  validate(p);
  XS_ASSERT(int(routing.size()) == p.ranks, "routing: {} ranks given for {}", routing.size(), describe(p));
  std::vector<int> seen(p.experts, -1);
  for (int r = 0; r < p.ranks; ++r) {
    const Routing& rt = routing[r];
    XS_ASSERT(rt.tokens == p.tokens_per_rank && rt.topk == p.topk &&
                  rt.expert.size() == std::size_t(rt.tokens) * rt.topk && rt.weight.size() == rt.expert.size(),
              "routing of rank {}: shape [{}, {}] does not match {}", r, rt.tokens, rt.topk, describe(p));
    for (int t = 0; t < rt.tokens; ++t)
      for (int j = 0; j < rt.topk; ++j) {
        const int e = rt.expert[std::size_t(t) * rt.topk + j];
        const float w = rt.weight[std::size_t(t) * rt.topk + j];
        XS_ASSERT(e >= 0 && e < p.experts, "routing of rank {}: token {} slot {} has expert {} (experts 0..{})", r, t,
                  j, e, p.experts - 1);
        XS_ASSERT(seen[e] != r * p.tokens_per_rank + t, "routing of rank {}: token {} names expert {} twice", r, t, e);
        seen[e] = r * p.tokens_per_rank + t;
        XS_ASSERT(std::isfinite(w), "routing of rank {}: token {} slot {} weight is not finite", r, t, j);
      }
  }
}

}  // namespace xstage::moe
