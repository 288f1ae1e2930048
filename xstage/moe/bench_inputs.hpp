// What both MoE benches (moe_bench.cpp over NCCL ranks, moe_host_link.cpp on one GPU)
// feed the kernels and how they check them: one rank's random inputs, seeded by rank,
// and the relative difference of two bf16 outputs. Private to xstage/moe.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "xstage/moe/moe.hpp"
#include "xstage/moe/unfused.hpp"

namespace xstage::moe {

// Two bf16 outputs of the same layer that differ by accumulation order only.
inline constexpr double kMaxRelErr = 2e-2;

// max |a - b| over max |b| (infinite when a has a non-finite value).
inline double max_rel_diff(const std::vector<std::uint16_t>& a, const std::vector<std::uint16_t>& b) {
  double scale = 1e-30, diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double x = from_bf16(a[i]), y = from_bf16(b[i]);
    scale = std::max(scale, std::abs(y));
    diff = std::isfinite(x) ? std::max(diff, std::abs(x - y)) : INFINITY;
  }
  return diff / scale;
}

// One rank's inputs, random and seeded by rank: expert weights, tokens, routing weights.
struct RankInputs {
  DeviceBuffer<std::uint16_t> w1, w2, x;
  DeviceBuffer<float> wt;
  RankInputs(const Problem& p, const Routing& routing, int r, cudaStream_t st)
      : w1(std::size_t(p.experts_per_rank()) * 2 * p.intermediate * p.hidden),
        w2(std::size_t(p.experts_per_rank()) * p.hidden * p.intermediate),
        x(std::size_t(p.tokens_per_rank) * p.hidden),
        wt(routing.weight.size()) {
    fill_random_bf16(w1.get(), w1.size(), 1000 + r, 0.02f, st);
    fill_random_bf16(w2.get(), w2.size(), 2000 + r, 0.02f, st);
    fill_random_bf16(x.get(), x.size(), 3000 + r, 1.0f, st);
    copy_to_device(wt.get(), routing.weight.data(), wt.size() * 4);
    XS_CHECK_CUDA(cudaStreamSynchronize(st));
  }
  std::size_t out_elems(const Problem& p) const { return std::size_t(p.tokens_per_rank) * p.hidden; }
};

}  // namespace xstage::moe
