// One token's top-k softmax routing (moe::route_from_logits), written for host and
// device so that a GPU routing kernel chooses the same experts with the same weights.
// Such a kernel for the DiT's MoE FFN is commit bee03ff, reverted until it has run on
// a GPU (docs/xstage-dit.md).
//
// Each expert, in id order, is inserted before the first strictly smaller logit kept
// so far and the rest moves down one place: larger logit first, and among equal logits
// the lower id. The insertion uses selects rather than branches (random logits make
// insertion branches mispredict). Weights: exp(l - max) over the k kept, in double,
// normalised, rounded to float; exp(0) = 1 exactly for the first.
#pragma once

#include <cmath>

#include "xstage/host_device.hpp"

namespace xstage::moe {

// l: the token's `experts` logits (finite); val/idx/ex: scratch of k entries; writes
// expert[0..k) and weight[0..k). 1 <= k <= experts.
XS_HD void topk_softmax_token(const float* l, int experts, int k, float* val, int* idx, double* ex, int* expert,
                              float* weight) {
  for (int j = 0; j < k; ++j) val[j] = -INFINITY, idx[j] = 0;
  for (int e = 0; e < experts; ++e) {
    float x = l[e];
    int xi = e;
    bool moving = false;  // below the insertion point every entry moves down one place
#if defined(__CUDACC__)
#pragma unroll
#else
#pragma GCC unroll 8
#endif
    for (int j = 0; j < k; ++j) {
      const bool up = moving || x > val[j];
      moving = up;
      const float v = val[j];
      const int vi = idx[j];
      val[j] = up ? x : v;
      idx[j] = up ? xi : vi;
      x = up ? v : x;
      xi = up ? vi : xi;
    }
  }
  double sum = ex[0] = 1.0;
  for (int j = 1; j < k; ++j) sum += ex[j] = ::exp(double(val[j]) - double(val[0]));
  for (int j = 0; j < k; ++j) {
    expert[j] = idx[j];
    weight[j] = static_cast<float>(ex[j] / sum);
  }
}

}  // namespace xstage::moe
