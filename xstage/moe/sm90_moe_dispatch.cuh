// Phase 1 of the fused MoE kernel: the dispatch of this rank's (token, slot) rows to
// the ranks of their experts (REMOTE STORE into the destination's recv), in passes
// over local expert ids (moe::DispatchPlan): the first pass by every warp before the
// roles start, the others by the producer warpgroup's warps 1-2 while the tiles run.
#pragma once

#include <cstddef>
#include <cstdint>

#include "sm90_moe_fused_traits.cuh"
#include "xstage/sync/ptx.cuh"

namespace xstage::moe::device {

// Warp `w` of `nw` copies this CTA's (token, slot) rows whose local expert id is in
// [lo, hi) to their destinations' recv and releases them. The CTA's pairs are
// i = blockIdx.x + j * gridDim.x; the warp takes j = w + nw * (32 c + lane), 32 at a
// time (one expert id per lane, a ballot of the pass's; spread over the warps, so a
// CTA with few pairs copies them side by side), copies the hits one row after
// another (16 B per lane and step, kDepth steps in flight), then: every lane's
// fence.proxy.async.global (TMA reads the rows), __syncwarp, and lane 0's
// fence.acq_rel.sys before one red.relaxed.sys.add per row on the destination's
// counter of the row's expert (the release pattern of the tiles' counters).
// kDepth: 4 before the roles start, 2 in the producer warpgroup (40 registers).
template <int kDepth>
__device__ void dispatch_pass(const FusedArgs& a, int lo, int hi, int w, int nw) {
  const int pairs = a.tokens * a.topk, epr = a.experts_local, lane = threadIdx.x % 32, vec = a.hidden / 8;
  const int b = static_cast<int>(blockIdx.x), grid = static_cast<int>(gridDim.x);
  const int mine = b < pairs ? (pairs - 1 - b) / grid + 1 : 0;  // this CTA's pairs
  auto pair_of = [&](int c, int l) { return b + (w + nw * (32 * c + l)) * grid; };
#pragma unroll 1
  for (int c = 0; w + nw * 32 * c < mine; ++c) {
    const int j = w + nw * (32 * c + lane);
    const int le = j < mine ? a.expert[b + j * grid] % epr : -1;
    const unsigned hit = __ballot_sync(0xffffffffu, le >= lo && le < hi);
    if (hit == 0) continue;
#pragma unroll 1
    for (unsigned todo = hit; todo != 0; todo &= todo - 1) {
      const int i = pair_of(c, __ffs(static_cast<int>(todo)) - 1);
      auto* dst = reinterpret_cast<uint4*>(static_cast<std::uint16_t*>(window_at(a, a.recv_off, a.send_rank[i])) +
                                           static_cast<std::size_t>(a.send_row[i]) * a.hidden);
      const auto* src = reinterpret_cast<const uint4*>(a.x + static_cast<std::size_t>(i / a.topk) * a.hidden);
#pragma unroll 1
      for (int v = lane; v < vec; v += 32 * kDepth) {
        uint4 r[kDepth];
#pragma unroll
        for (int d = 0; d < kDepth; ++d)
          if (v + 32 * d < vec) r[d] = src[v + 32 * d];
#pragma unroll
        for (int d = 0; d < kDepth; ++d)
          if (v + 32 * d < vec) dst[v + 32 * d] = r[d];
      }
    }
    sync::fence_proxy_async_global();  // the rows are read by TMA on the destination
    __syncwarp();
    if (lane == 0) {
      sync::fence_acq_rel_sys();
#pragma unroll 1
      for (unsigned todo = hit; todo != 0; todo &= todo - 1) {
        const int i = pair_of(c, __ffs(static_cast<int>(todo)) - 1);
        sync::red_add_relaxed_sys(static_cast<unsigned*>(window_at(a, 0, a.send_rank[i])) + a.expert[i] % epr, 1u);
      }
    }
    __syncwarp();
  }
}

}  // namespace xstage::moe::device
