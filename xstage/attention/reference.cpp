// CPU reference for the attention forward pass: two passes per query row (exact
// row max, then exp and sums), fp64 throughout. O(B·H·Sq·Skv·D): for small
// problems and for checking the GPU naive reference.
#include <cmath>
#include <limits>

#include "common/check.hpp"
#include "xstage/attention/attention.hpp"

namespace xstage::attention {

RefResult reference_fwd(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                        int64_t B, int64_t Sq, int64_t Skv, int64_t H, int64_t D, bool causal, double scale) {
  XS_ASSERT(static_cast<int64_t>(q.size()) == B * Sq * H * D, "reference: Q has {} values, expected {}", q.size(),
            B * Sq * H * D);
  XS_ASSERT(static_cast<int64_t>(k.size()) == B * Skv * H * D && k.size() == v.size(),
            "reference: K/V have {}/{} values, expected {}", k.size(), v.size(), B * Skv * H * D);
  const MaskInfo mask{static_cast<int>(Sq), static_cast<int>(Skv), causal};
  RefResult r;
  r.o.assign(static_cast<size_t>(B * Sq * H * D), 0.0);
  r.lse.assign(static_cast<size_t>(B * H * Sq), -std::numeric_limits<double>::infinity());
  std::vector<double> s(static_cast<size_t>(Skv));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Sq; ++i) {
        const float* qi = &q[static_cast<size_t>(((b * Sq + i) * H + h) * D)];
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < Skv; ++j) {
          if (!mask.visible(static_cast<int>(i), static_cast<int>(j))) {
            s[j] = -std::numeric_limits<double>::infinity();
            continue;
          }
          const float* kj = &k[static_cast<size_t>(((b * Skv + j) * H + h) * D)];
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += static_cast<double>(qi[d]) * kj[d];
          s[j] = dot * scale;
          mx = std::max(mx, s[j]);
        }
        if (mx == -std::numeric_limits<double>::infinity()) continue;  // no visible key: O = 0, LSE = -inf
        double sum = 0;
        double* oi = &r.o[static_cast<size_t>(((b * Sq + i) * H + h) * D)];
        for (int64_t j = 0; j < Skv; ++j) {
          if (s[j] == -std::numeric_limits<double>::infinity()) continue;
          const double p = std::exp(s[j] - mx);
          sum += p;
          const float* vj = &v[static_cast<size_t>(((b * Skv + j) * H + h) * D)];
          for (int64_t d = 0; d < D; ++d) oi[d] += p * vj[d];
        }
        for (int64_t d = 0; d < D; ++d) oi[d] /= sum;
        r.lse[static_cast<size_t>((b * H + h) * Sq + i)] = mx + std::log(sum);
      }
  return r;
}

}  // namespace xstage::attention
