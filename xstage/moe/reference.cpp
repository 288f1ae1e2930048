// Host reference of the whole layer, and a token-by-token naive version to test it.
// Sums in fp64 in the same order in both (so they agree bitwise); bf16 rounding at
// the points where the kernel stores bf16: H (after SwiGLU), comb (after W2), out.
#include <cmath>
#include <random>

#include "common/check.hpp"
#include "xstage/moe/moe.hpp"

namespace xstage::moe {

namespace {

double silu(double g) { return g / (1.0 + std::exp(-g)); }

// One expert on one row: x [hidden] -> y [hidden] (bf16 values as float).
void expert_row(const Problem& p, const bf16_bits* w1, const bf16_bits* w2, const bf16_bits* x, float* y) {
  const int H = p.hidden, I = p.intermediate;
  std::vector<float> h(I);
  for (int j = 0; j < I; ++j) {
    double g = 0, u = 0;
    const bf16_bits* wg = w1 + std::size_t(j) * H;
    const bf16_bits* wu = w1 + std::size_t(I + j) * H;
    for (int c = 0; c < H; ++c) {
      const double xv = from_bf16(x[c]);
      g += xv * from_bf16(wg[c]);
      u += xv * from_bf16(wu[c]);
    }
    h[j] = round_bf16(static_cast<float>(silu(g) * u));
  }
  for (int c = 0; c < H; ++c) {
    double acc = 0;
    const bf16_bits* wd = w2 + std::size_t(c) * I;
    for (int j = 0; j < I; ++j) acc += double(h[j]) * from_bf16(wd[j]);
    y[c] = round_bf16(static_cast<float>(acc));
  }
}

std::vector<bf16_bits> uniform_bf16(std::size_t n, std::uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<bf16_bits> v(n);
  for (auto& b : v) b = to_bf16(u(rng));
  return v;
}

}  // namespace

Weights random_weights(const Problem& p, std::uint64_t seed, float scale) {
  validate(p);
  Weights w;
  const std::size_t n1 = std::size_t(p.experts_per_rank()) * 2 * p.intermediate * p.hidden;
  const std::size_t n2 = std::size_t(p.experts_per_rank()) * p.hidden * p.intermediate;
  for (int r = 0; r < p.ranks; ++r) {
    w.w1.push_back(uniform_bf16(n1, seed * 1000 + 2 * r + 1, scale));
    w.w2.push_back(uniform_bf16(n2, seed * 1000 + 2 * r + 2, scale));
  }
  return w;
}

std::vector<std::vector<bf16_bits>> random_tokens(const Problem& p, std::uint64_t seed, float scale) {
  validate(p);
  std::vector<std::vector<bf16_bits>> x;
  for (int r = 0; r < p.ranks; ++r)
    x.push_back(uniform_bf16(std::size_t(p.tokens_per_rank) * p.hidden, seed * 7919 + r, scale));
  return x;
}

std::vector<std::vector<float>> reference_forward(const Problem& p, const std::vector<Routing>& routing,
                                                  const Layout& L, const Weights& w,
                                                  const std::vector<std::vector<bf16_bits>>& x) {
  validate(p, routing);
  const int H = p.hidden, I = p.intermediate, K = p.topk, T = p.tokens_per_rank;
  const auto recv = dispatch_rows(L, x, H);
  // Expert outputs in recv order, as bf16 bits (what the kernel's epilogue stores).
  std::vector<std::vector<bf16_bits>> y(p.ranks);
  std::vector<float> yrow(H);
  for (int d = 0; d < p.ranks; ++d) {
    const RankLayout& R = L.ranks[d];
    y[d].assign(std::size_t(R.rows()) * H, 0);
    for (int e = 0; e < p.experts_per_rank(); ++e)
      for (int row = R.expert_offset[e]; row < R.expert_offset[e + 1]; ++row) {
        expert_row(p, &w.w1[d][std::size_t(e) * 2 * I * H], &w.w2[d][std::size_t(e) * H * I],
                   &recv[d][std::size_t(row) * H], yrow.data());
        for (int c = 0; c < H; ++c) y[d][std::size_t(row) * H + c] = to_bf16(yrow[c]);
      }
  }
  const auto comb = combine_rows(L, y, H);
  std::vector<std::vector<float>> out(p.ranks, std::vector<float>(std::size_t(T) * H));
  for (int r = 0; r < p.ranks; ++r)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < H; ++c) {
        float acc = 0;  // the kernel's combine sums in fp32, slot order
        for (int j = 0; j < K; ++j)
          acc += routing[r].weight[std::size_t(t) * K + j] * from_bf16(comb[r][(std::size_t(t) * K + j) * H + c]);
        out[r][std::size_t(t) * H + c] = round_bf16(acc);
      }
  return out;
}

std::vector<std::vector<float>> naive_forward(const Problem& p, const std::vector<Routing>& routing, const Weights& w,
                                              const std::vector<std::vector<bf16_bits>>& x) {
  validate(p, routing);
  const int H = p.hidden, I = p.intermediate, K = p.topk, T = p.tokens_per_rank, epr = p.experts_per_rank();
  std::vector<std::vector<float>> out(p.ranks, std::vector<float>(std::size_t(T) * H));
  std::vector<float> y(std::size_t(K) * H);
  for (int r = 0; r < p.ranks; ++r)
    for (int t = 0; t < T; ++t) {
      for (int j = 0; j < K; ++j) {
        const int e = routing[r].expert[std::size_t(t) * K + j], d = e / epr, el = e % epr;
        expert_row(p, &w.w1[d][std::size_t(el) * 2 * I * H], &w.w2[d][std::size_t(el) * H * I],
                   &x[r][std::size_t(t) * H], &y[std::size_t(j) * H]);
      }
      for (int c = 0; c < H; ++c) {
        float acc = 0;
        for (int j = 0; j < K; ++j) acc += routing[r].weight[std::size_t(t) * K + j] * y[std::size_t(j) * H + c];
        out[r][std::size_t(t) * H + c] = round_bf16(acc);
      }
    }
  return out;
}

}  // namespace xstage::moe
