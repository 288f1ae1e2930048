// Fused expert-parallel MoE forward: one persistent kernel per rank.
//
// Protocol (who waits for whom; every wait has the WaitBudget timeout):
//   0. start   block 0: LSA barrier over all ranks (everyone has finished the
//              previous launch, so recv/comb may be overwritten), then releases
//              `gate` = epoch; the other blocks acquire it.
//   1. dispatch each block copies its (token, slot) rows to the destination's recv
//              (remote st.global.v4 through LSA pointers), then one thread:
//              fence.acq_rel.sys; red.relaxed.sys.add dispatch_cnt[expert] on the
//              destination, one per row (release pattern: fence + relaxed atomics).
//   2. tiles   blocks take items of the schedule's order by ticket. Dependencies
//              always precede in the order, and all blocks are resident, so the
//              waits below always end.
//              L1 (e, m, n): acquire dispatch_cnt[e] >= dispatch_expect[e]; gate/up
//                 GEMM over hidden; SwiGLU; bf16 H tile (local); release
//                 l1_done[e, m] += 1.
//              L2 (e, m, n): acquire l1_done[e, m] >= l1_n_blocks; GEMM over I;
//                 REMOTE STORE: each output row to its owner's comb[token*k+slot]
//                 (st.global.v4 through LSA pointers); then fence.acq_rel.sys and
//                 one red.add per owner of the rows' count on combine_cnt.
//   3. combine acquire combine_cnt >= combine_expect (every expert's rows for this
//              rank's tokens, all n-blocks); out[t] = sum_k w[t,k] * comb[t,k]
//              (fp32, slot order, one bf16 rounding).
// Math: first version, mma.sync m16n8k16 bf16 -> fp32 from shared memory tiles
// loaded with plain 16 B loads (no TMA, no wgmma, no pipelining): correct first.
#pragma once

#include <cuda_bf16.h>

#include "sm90_moe_fused.hpp"
#include "xstage/comm_device.cuh"

namespace xstage::moe::device {

constexpr int kPadK = kTileK + 8;    // smem row stride (elements) of operand tiles
constexpr int kPadC = kTileN + 8;    // smem row stride of the output staging tile

struct Smem {
  alignas(16) std::uint16_t a[kTileM][kPadK];
  alignas(16) std::uint16_t b[2][kTileN][kPadK];  // L1: gate, up; L2: b[0] only
  alignas(16) std::uint16_t c[kTileM][kPadC];
  WorkItem item;
  int next;
};

// ---------------------------------------------------------------- small helpers

__device__ __forceinline__ void red_add_release_sys(unsigned* p, unsigned v) {
  asm volatile("red.relaxed.sys.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ void fence_acq_rel_sys() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }

__device__ __forceinline__ float bf2f(std::uint16_t b) { return __uint_as_float(static_cast<unsigned>(b) << 16); }
__device__ __forceinline__ std::uint16_t f2bf(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

// warp: D += A(16x16, row) * B(16x8, col), bf16 in, fp32 accumulate.
__device__ __forceinline__ void mma_16816(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ unsigned lds32(const std::uint16_t* p) { return *reinterpret_cast<const unsigned*>(p); }

// block: loads a [64 x kTileK] bf16 tile (rows >= valid are zero) into smem.
__device__ __forceinline__ void load_tile(std::uint16_t (*dst)[kPadK], const std::uint16_t* src, std::size_t ld,
                                          int valid) {
  constexpr int kChunks = kTileK / 8;  // 16 B per chunk
  for (int i = threadIdx.x; i < kTileM * kChunks; i += blockDim.x) {
    const int r = i / kChunks, c = i % kChunks;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < valid) v = *reinterpret_cast<const uint4*>(src + r * ld + c * 8);
    *reinterpret_cast<uint4*>(&dst[r][c * 8]) = v;
  }
}

// warp: its 32x32 quarter of a 64x64 tile, one kTileK step; acc[mi][ni][4].
__device__ __forceinline__ void warp_mma_step(const std::uint16_t (*a)[kPadK], const std::uint16_t (*b)[kPadK],
                                              float (&acc)[2][4][4]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / 2, wn = warp % 2, g = lane / 4, q = lane % 4;
  #pragma unroll
  for (int ks = 0; ks < kTileK; ks += 16) {
    unsigned af[2][4], bfr[4][2];
    #pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
      const int r = wm * 32 + mi * 16 + g;
      af[mi][0] = lds32(&a[r][ks + q * 2]);
      af[mi][1] = lds32(&a[r + 8][ks + q * 2]);
      af[mi][2] = lds32(&a[r][ks + q * 2 + 8]);
      af[mi][3] = lds32(&a[r + 8][ks + q * 2 + 8]);
    }
    #pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
      const int n = wn * 32 + ni * 8 + g;
      bfr[ni][0] = lds32(&b[n][ks + q * 2]);
      bfr[ni][1] = lds32(&b[n][ks + q * 2 + 8]);
    }
    #pragma unroll
    for (int mi = 0; mi < 2; ++mi)
      #pragma unroll
      for (int ni = 0; ni < 4; ++ni) mma_16816(acc[mi][ni], af[mi], bfr[ni]);
  }
}

// Calls f(row, col, acc index) for the accumulator layout of warp_mma_step.
template <typename F>
__device__ __forceinline__ void for_each_acc(F&& f) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / 2, wn = warp % 2, g = lane / 4, q = lane % 4;
  #pragma unroll
  for (int mi = 0; mi < 2; ++mi)
    #pragma unroll
    for (int ni = 0; ni < 4; ++ni)
      #pragma unroll
      for (int j = 0; j < 4; ++j) f(wm * 32 + mi * 16 + g + (j / 2) * 8, wn * 32 + ni * 8 + q * 2 + (j % 2), mi, ni, j);
}

// ---------------------------------------------------------------- phases

__device__ void dispatch(const FusedArgs& a) {
  const int pairs = a.tokens * a.topk, vec = a.hidden / 8;
  const int epr = a.experts_local;
  for (int i = blockIdx.x; i < pairs; i += gridDim.x) {
    const int t = i / a.topk;
    auto* dst = static_cast<std::uint16_t*>(ncclGetLsaPointer(a.window, a.recv_off, a.send_rank[i])) +
                static_cast<std::size_t>(a.send_row[i]) * a.hidden;
    const auto* src = reinterpret_cast<const uint4*>(a.x + static_cast<std::size_t>(t) * a.hidden);
    for (int v = threadIdx.x; v < vec; v += blockDim.x) reinterpret_cast<uint4*>(dst)[v] = src[v];
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    fence_acq_rel_sys();
    for (int i = blockIdx.x; i < pairs; i += gridDim.x) {
      auto* cnt = static_cast<unsigned*>(ncclGetLsaPointer(a.window, 0, a.send_rank[i]));
      red_add_release_sys(cnt + a.expert[i] % epr, 1u);
    }
  }
}

__device__ void l1_tile(const FusedArgs& a, Smem& s, const WorkItem& it) {
  const int row0 = a.expert_offset[it.expert] + it.m_block * kTileM;
  const int valid = min(kTileM, a.expert_offset[it.expert + 1] - row0);
  if (threadIdx.x == 0) {
    const auto* cnt = static_cast<const unsigned*>(ncclGetLocalPointer(a.window, 0)) + it.expert;
    comm::wait_geq_acquire(cnt, a.dispatch_expect[it.expert], a.wait, "dispatch rows of an expert");
  }
  __syncthreads();
  const auto* recv = static_cast<const std::uint16_t*>(ncclGetLocalPointer(a.window, a.recv_off));
  const std::uint16_t* x = recv + static_cast<std::size_t>(row0) * a.hidden;
  const std::uint16_t* w = a.w1 + static_cast<std::size_t>(it.expert) * 2 * a.inter * a.hidden;
  const std::uint16_t* wg = w + static_cast<std::size_t>(it.n_block) * kTileN * a.hidden;
  const std::uint16_t* wu = w + (static_cast<std::size_t>(a.inter) + it.n_block * kTileN) * a.hidden;
  float g[2][4][4] = {}, u[2][4][4] = {};
  for (int k = 0; k < a.hidden; k += kTileK) {
    load_tile(s.a, x + k, a.hidden, valid);
    load_tile(s.b[0], wg + k, a.hidden, kTileN);
    load_tile(s.b[1], wu + k, a.hidden, kTileN);
    __syncthreads();
    warp_mma_step(s.a, s.b[0], g);
    warp_mma_step(s.a, s.b[1], u);
    __syncthreads();
  }
  // SwiGLU epilogue: h = silu(gate) * up, staged as bf16, stored 16 B per thread.
  for_each_acc([&](int r, int c, int mi, int ni, int j) {
    const float gv = g[mi][ni][j];
    s.c[r][c] = f2bf(gv / (1.0f + __expf(-gv)) * u[mi][ni][j]);
  });
  __syncthreads();
  constexpr int kChunks = kTileN / 8;
  for (int i = threadIdx.x; i < valid * kChunks; i += blockDim.x) {
    const int r = i / kChunks, c = i % kChunks;
    *reinterpret_cast<uint4*>(a.h + static_cast<std::size_t>(row0 + r) * a.inter + it.n_block * kTileN + c * 8) =
        *reinterpret_cast<const uint4*>(&s.c[r][c * 8]);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    fence_acq_rel_sys();
    red_add_release_sys(a.l1_done + it.expert * a.max_m_blocks + it.m_block, 1u);
  }
}

__device__ void l2_tile(const FusedArgs& a, Smem& s, const WorkItem& it) {
  const int row0 = a.expert_offset[it.expert] + it.m_block * kTileM;
  const int valid = min(kTileM, a.expert_offset[it.expert + 1] - row0);
  if (threadIdx.x == 0)
    comm::wait_geq_acquire(a.l1_done + it.expert * a.max_m_blocks + it.m_block, static_cast<unsigned>(a.l1_n_blocks),
                           a.wait, "L1 tiles of an expert's row block");
  __syncthreads();
  const std::uint16_t* hrow = a.h + static_cast<std::size_t>(row0) * a.inter;
  const std::uint16_t* w = a.w2 + (static_cast<std::size_t>(it.expert) * a.hidden + it.n_block * kTileN) * a.inter;
  float y[2][4][4] = {};
  for (int k = 0; k < a.inter; k += kTileK) {
    load_tile(s.a, hrow + k, a.inter, valid);
    load_tile(s.b[0], w + k, a.inter, kTileN);
    __syncthreads();
    warp_mma_step(s.a, s.b[0], y);
    __syncthreads();
  }
  for_each_acc([&](int r, int c, int mi, int ni, int j) { s.c[r][c] = f2bf(y[mi][ni][j]); });
  __syncthreads();
  // REMOTE STORE (remote_store_combine): each row to its owner's comb[token*k + slot].
  constexpr int kChunks = kTileN / 8;
  for (int i = threadIdx.x; i < valid * kChunks; i += blockDim.x) {
    const int r = i / kChunks, c = i % kChunks, row = row0 + r;
    auto* comb = static_cast<std::uint16_t*>(ncclGetLsaPointer(a.window, a.comb_off, a.recv_src_rank[row]));
    *reinterpret_cast<uint4*>(comb + static_cast<std::size_t>(a.recv_src_slot[row]) * a.hidden +
                              it.n_block * kTileN + c * 8) = *reinterpret_cast<const uint4*>(&s.c[r][c * 8]);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned per_owner[kMaxRanks] = {};
    for (int r = 0; r < valid; ++r) ++per_owner[a.recv_src_rank[row0 + r]];
    fence_acq_rel_sys();
    for (int o = 0; o < a.ranks; ++o)
      if (per_owner[o]) {
        auto* cnt = static_cast<unsigned*>(ncclGetLsaPointer(a.window, 0, o)) + kMaxLocalExperts;
        red_add_release_sys(cnt, per_owner[o]);
      }
  }
}

__device__ void combine(const FusedArgs& a) {
  if (threadIdx.x == 0) {
    const auto* cnt = static_cast<const unsigned*>(ncclGetLocalPointer(a.window, 0)) + kMaxLocalExperts;
    comm::wait_geq_acquire(cnt, a.combine_expect, a.wait, "combine rows of this rank's tokens");
  }
  __syncthreads();
  const auto* comb = static_cast<const std::uint16_t*>(ncclGetLocalPointer(a.window, a.comb_off));
  for (int t = blockIdx.x; t < a.tokens; t += gridDim.x)
    for (int c = threadIdx.x; c < a.hidden; c += blockDim.x) {
      float acc = 0.f;
      for (int j = 0; j < a.topk; ++j) {
        const std::size_t slot = static_cast<std::size_t>(t) * a.topk + j;
        acc = __fadd_rn(acc, __fmul_rn(a.weight[slot], bf2f(comb[slot * a.hidden + c])));
      }
      a.out[static_cast<std::size_t>(t) * a.hidden + c] = f2bf(acc);
    }
}

// ---------------------------------------------------------------- the kernel

__global__ void __launch_bounds__(kFusedThreads, 1) moe_fused_kernel(const FusedArgs a) {
  __shared__ Smem s;
  // 0. start: everyone finished the previous launch.
  if (blockIdx.x == 0) {
    comm::lsa_barrier_sync(a.dev, 0, a.wait);
    if (threadIdx.x == 0) comm::store_release_sys(a.gate, a.epoch);
  }
  if (threadIdx.x == 0) comm::wait_geq_acquire(a.gate, a.epoch, a.wait, "start gate (LSA barrier)");
  __syncthreads();
  // 1. dispatch
  dispatch(a);
  // 2. tiles in the scheduler's order, by ticket
  while (true) {
    if (threadIdx.x == 0) {
      const int t = static_cast<int>(atomicAdd(a.ticket, 1u));
      s.next = t;
      if (t < a.n_items) s.item = a.items[t];
    }
    __syncthreads();
    if (s.next >= a.n_items) break;
    const WorkItem it = s.item;
    __syncthreads();
    if (it.kind == TileKind::l1)
      l1_tile(a, s, it);
    else
      l2_tile(a, s, it);
  }
  // 3. combine
  combine(a);
}

}  // namespace xstage::moe::device
