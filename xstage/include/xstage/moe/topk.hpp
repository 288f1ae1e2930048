// One token's top-k softmax routing (moe::route_from_logits), written for host and
// device so that the GPU routing kernel (xstage/moe/device_route.cu) chooses the same
// experts with the same weights.
//
// Each expert, in id order, is inserted before the first strictly smaller logit kept
// so far and the rest moves down one place: larger logit first, and among equal logits
// the lower id. The insertion uses selects rather than branches (random logits make
// insertion branches mispredict). Weights: exp(l - max) over the k kept, in double,
// normalised, rounded to float; exp(0) = 1 exactly for the first.
#pragma once

#include <cmath>

#include "common/host_device.hpp"

namespace xstage::moe {

// The weights of k kept logits val[0..k) (largest first): exp(val[j] - val[0]) in
// double, normalised, rounded to float. ex: scratch of k entries.
XS_HD void topk_weights(const float* val, int k, double* ex, float* weight) {
  double sum = ex[0] = 1.0;
  for (int j = 1; j < k; ++j) sum += ex[j] = ::exp(double(val[j]) - double(val[0]));
  for (int j = 0; j < k; ++j) weight[j] = static_cast<float>(ex[j] / sum);
}

// Inserts logit x of expert xi into the kept k entries val/idx (largest first): before
// the first strictly smaller one, the rest moving down one place (selects, no branches).
XS_HD void topk_insert(float x, int xi, int k, float* val, int* idx) {
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

// l: the token's `experts` logits, each finite (then the k experts chosen are
// distinct); val/idx/ex: scratch of k entries; writes expert[0..k) and weight[0..k).
// 1 <= k <= experts.
XS_HD void topk_softmax_token(const float* l, int experts, int k, float* val, int* idx, double* ex, int* expert,
                              float* weight) {
  for (int j = 0; j < k; ++j) val[j] = -INFINITY, idx[j] = 0;
  for (int e = 0; e < experts; ++e) topk_insert(l[e], e, k, val, idx);
  topk_weights(val, k, ex, weight);
  for (int j = 0; j < k; ++j) expert[j] = idx[j];
}

}  // namespace xstage::moe
