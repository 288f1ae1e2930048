// Phase 3 of the fused MoE kernel, the combine: once every (token, slot) row of this
// rank's tokens is back in comb (the owners' counter, released by the L2 tiles of
// every rank; with the combine drain, every owner's drain flag), out[t] = sum_k w[t,k]
// * comb[t,k] in fp32, in slot order, one bf16 rounding.
#pragma once

#include <cstddef>
#include <cstdint>

#include "sm90_moe_fused_traits.cuh"
#include "sm90_moe_profile.cuh"
#include "xstage/hopper/mbarrier.cuh"
#include "xstage/sync/bf16.hpp"
#include "xstage/sync/wait.cuh"

namespace xstage::moe::device {

// Where (token, slot) s's row is: comb[s]; with the combine drain, its return row, or
// for a row this rank computed, the stage row of its recv row.
__device__ __forceinline__ const std::uint16_t* slot_row(const FusedArgs& a, const std::uint16_t* comb, std::size_t s) {
  if (a.drain_stage == nullptr) return comb + s * a.hidden;
  if (a.send_rank[s] != a.rank) return comb + static_cast<std::size_t>(a.return_row[s]) * a.hidden;
  return a.drain_stage + static_cast<std::size_t>(a.drain_stage_row[a.send_row[s]]) * a.hidden;
}

// Consumer threads only (ctid 0..255): 8 columns per thread and step.
constexpr int kCombineBatch = 8;  // slots loaded before they are summed
template <class Prof>
__device__ void combine(const FusedArgs& a, int ctid, Prof& prof) {
  using C = ConsumerPhase;
  constexpr int kCombineThreads = 128 * Shape::kConsumerWGs;
  auto tp = Prof::now();
  if (ctid == 0) {
    const auto* flags = static_cast<const unsigned*>(local_window_at(a, 0));
    if (a.drain_stage == nullptr) {
      sync::wait_geq_acquire(a.wait, flags + kMaxLocalExperts, a.combine_expect, MoeSite::combine_rows, -1,
                             sync::kCtaBudgets);
    } else {  // every owner's side stream (this rank's too: its own L2 tiles have ended)
#pragma unroll 1
      for (int d = 0; d < a.ranks; ++d)
        sync::wait_geq_acquire(a.wait, flags + kDrainFlagsIndex + d, a.epoch, MoeSite::drained_rows, d,
                               sync::kCtaBudgets);
    }
  }
  hopper::named_sync(kConsumersBar, kCombineThreads);
  tp = prof.end(C::combine_wait, tp);
  const std::uint16_t* comb = local_comb_rows(a);
  const int vec = a.hidden / 8;
  const long long total = static_cast<long long>(a.tokens) * vec;
  for (long long i = static_cast<long long>(blockIdx.x) * kCombineThreads + ctid; i < total;
       i += static_cast<long long>(gridDim.x) * kCombineThreads) {
    const int tok = static_cast<int>(i / vec), v = static_cast<int>(i % vec);
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    // Up to kCombineBatch slots' loads in flight before their sum (which stays in slot
    // order: the same rounding as one slot at a time, whose loads waited one by one).
#pragma unroll 1
    for (int j0 = 0; j0 < a.topk; j0 += kCombineBatch) {
      uint4 raw[kCombineBatch];
      float w[kCombineBatch];
#pragma unroll
      for (int jj = 0; jj < kCombineBatch; ++jj) {
        if (j0 + jj >= a.topk) break;
        const std::size_t s = static_cast<std::size_t>(tok) * a.topk + j0 + jj;
        w[jj] = a.weight[s];
        raw[jj] = *reinterpret_cast<const uint4*>(slot_row(a, comb, s) + v * 8);
      }
#pragma unroll
      for (int jj = 0; jj < kCombineBatch; ++jj) {
        if (j0 + jj >= a.topk) break;
        const uint32_t words[4] = {raw[jj].x, raw[jj].y, raw[jj].z, raw[jj].w};
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const std::uint16_t b = static_cast<std::uint16_t>(words[e / 2] >> (16 * (e % 2)));
          acc[e] = __fadd_rn(acc[e], __fmul_rn(w[jj], sync::from_bf16(b)));
        }
      }
    }
    uint4 o;
    o.x = sync::pack_bf16x2(acc[0], acc[1]);
    o.y = sync::pack_bf16x2(acc[2], acc[3]);
    o.z = sync::pack_bf16x2(acc[4], acc[5]);
    o.w = sync::pack_bf16x2(acc[6], acc[7]);
    *reinterpret_cast<uint4*>(a.out + static_cast<std::size_t>(tok) * a.hidden + v * 8) = o;
  }
  prof.end(C::combine, tp);
  prof.end(C::total, 0);  // the entry stamp was subtracted at the start
  prof.flush(a, 1 + ctid / 128);
}

}  // namespace xstage::moe::device
