// The QKV projection whose epilogue performs the pre-attention All-to-All
// (sm_90a, one persistent CTA per SM; protocol and layouts in xstage/ulysses_qkv.hpp).
//
// Inside a CTA (the shape of the fused MoE kernel's GEMM):
//   warpgroup 0   producer: setmaxnreg 40; thread 0 streams the K steps of its
//                 entries (CTA b: order[b], order[b + grid], ...) into a 4-deep ring
//                 of 48 KiB stages by TMA: h 128 x 64, W rows of head 2c, W rows of
//                 head 2c + 1 (zero-filled past 3H), 128-byte swizzle; a one-head
//                 entry (split tail, qkv_split_tail) loads h and that head's rows.
//   warpgroups 1-2 consumers: setmaxnreg 232; each owns 64 rows and two 64 x 128
//                 fp32 accumulators (one per head); 4 wgmma m64n256k16 per stage
//                 (4 m64n128k16 for a one-head entry, into acc0), one group in flight.
//   epilogue      per head, in registers: + bias; q and k: RMSNorm over the 128
//                 columns of a row (the row's values sit in the 4 lanes of a quad:
//                 two xor shuffles), times the norm weight, rotary turn of pair
//                 (2i, 2i + 1), both in the same thread; bf16; staged in shared
//                 memory 64 columns at a time (144-byte rows), then 16-byte stores
//                 of whole rows into the owner's q/k/v (REMOTE when owner != rank).
//                 After a tile: fence.acq_rel.sys, one red.add per head on its
//                 owner's completion counter for this rank; by default
//                 (release_by_agent) each warpgroup's thread 0 only counts the tile
//                 in shared memory (release, CTA scope) and lane 0 of the producer
//                 warpgroup's warp 1 fences and adds for both warpgroups once both
//                 counted it, so no consumer waits for its stores to drain.
// Start: block 0 raises this rank's ready flag on every owner (st.release.sys of
// the launch number); each consumer warpgroup acquires every owner's flag before
// its first store (the owner has finished what preceded this launch on its stream,
// i.e. its previous attention no longer reads the buffers). Every wait has a
// budget; on timeout it fills the host-mapped report and traps (no printf: a call
// would make ptxas serialise the wgmmas).
#include <cuda_bf16.h>

#include "qkv_fused.hpp"
#include "xstage/check_cuda.hpp"
#include "xstage/comm_device.cuh"
#include "xstage/hopper/mbarrier.cuh"
#include "xstage/hopper/tma.cuh"
#include "xstage/hopper/wgmma.cuh"
#include "xstage/ulysses_qkv.hpp"

namespace xstage::ulysses {

namespace qkv_device {

static_assert(QkvArgs{}.agent_max_sleep_ns == hopper::kAgentMaxSleepNs, "the agent's sleep cap has one default");

constexpr int kConsumerWGs = 2;
constexpr int kThreads = 128 * (1 + kConsumerWGs);
constexpr int kConsumerWarps = 4 * kConsumerWGs;
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
constexpr int kBoxBytes = kQkvTileRows * kQkvTileK * 2;  // 16 KiB
constexpr int kStageBytes = 3 * kBoxBytes;
constexpr int kStages = 4;
constexpr int kStagePitch = 64 + 8;  // staging row, elements (144 B: conflict-free)
constexpr int kStagingBytesPerWG = 64 * kStagePitch * 2;
constexpr int kOffStaging = kStages * kStageBytes;
constexpr int kOffBar = kOffStaging + kConsumerWGs * kStagingBytesPerWG;
constexpr int kSmemBytes = 1024 + kOffBar + 256;
static_assert(kSmemBytes <= 227 * 1024, "shared memory over the sm_90 per-block limit");
static_assert(128 * kProducerRegs + 128 * kConsumerWGs * kConsumerRegs <= 65536, "register file");

struct Barriers {
  uint64_t full[kStages], empty[kStages];
  uint32_t tiles_done[kConsumerWGs];  // release_by_agent: entries warpgroup w has stored
};
static_assert(sizeof(Barriers) <= 256, "barrier area");

__device__ __forceinline__ std::uint16_t f2bf(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  return static_cast<uint32_t>(f2bf(lo)) | (static_cast<uint32_t>(f2bf(hi)) << 16);
}

__device__ __forceinline__ void wait_stage(const QkvArgs& a, uint64_t* bar, uint32_t parity, QkvWaitSite site,
                                           int stage) {
  hopper::mbar_wait(bar, parity, a.report, static_cast<int>(site), stage);
}

// Acquires every owner's ready flag >= a.epoch (wrap-safe); on timeout reports
// (stage = the owner, parity = expected launch, smem = seen) and traps.
__device__ void wait_owners_ready(const QkvArgs& a) {
  for (int j = 0; j < a.ranks; ++j) {
    const unsigned long long start = comm::global_ns();
    uint32_t seen;
#pragma unroll 1
    while (static_cast<int32_t>((seen = comm::load_acquire_sys(a.ready_in + j)) - a.epoch) < 0) {
      if (comm::global_ns() - start > a.timeout_ns) {
        hopper::WaitTimeoutReport* r = a.report;
        if (r != nullptr && atomicCAS(&r->flag, 0, 2) == 0) {
          volatile hopper::WaitTimeoutReport* v = r;
          v->block = static_cast<int>(blockIdx.x);
          v->thread = static_cast<int>(threadIdx.x);
          v->site = static_cast<int>(QkvWaitSite::peer_ready);
          v->stage = j;
          v->parity = a.epoch;
          v->smem = seen;
          __threadfence_system();
          v->flag = 1;
          __threadfence_system();
        }
        asm volatile("trap;");
      }
    }
  }
}

__device__ void producer(const QkvArgs& a, uint8_t* smem, Barriers& bar) {
  hopper::tma_prefetch_desc(&a.map_h);
  hopper::tma_prefetch_desc(&a.map_w);
  const int k_steps = a.hidden / kQkvTileK;
  hopper::RingPos stage;
#pragma unroll 1
  for (int i = blockIdx.x; i < a.n_entries; i += gridDim.x) {
    const int e = a.order[i], t = qkv_entry_tile(e), sel = qkv_entry_sel(e);
    const int mb = t / a.col_tiles, ct = t % a.col_tiles;
    // Box 1: head 2c (or 2c + 1 for a second-head entry); box 2: head 2c + 1, whole tiles only.
    const int head1 = sel == 2 ? 2 * ct + 1 : 2 * ct;
#pragma unroll 1
    for (int k = 0; k < k_steps; ++k) {
      wait_stage(a, &bar.empty[stage.index], stage.phase ^ 1, QkvWaitSite::stage_empty, stage.index);
      uint8_t* dst = smem + stage.index * kStageBytes;
      uint64_t* full = &bar.full[stage.index];
      hopper::mbar_arrive_expect_tx(full, sel == 0 ? kStageBytes : 2 * kBoxBytes);
      hopper::tma_load_2d(&a.map_h, full, dst, k * kQkvTileK, mb * kQkvTileRows);
      hopper::tma_load_2d(&a.map_w, full, dst + kBoxBytes, k * kQkvTileK, head1 * kQkvHeadDim);
      if (sel == 0) hopper::tma_load_2d(&a.map_w, full, dst + 2 * kBoxBytes, k * kQkvTileK, (2 * ct + 1) * kQkvHeadDim);
      stage.advance<kStages>();
    }
  }
}

// Finishes one head in place. Accumulator layout (m64n128): acc[4j + e] is row
// g (e < 2) or g + 8 (e >= 2) of the warp's 16, column 8j + 2t + (e & 1).
__device__ __forceinline__ void finish_head(const QkvArgs& a, float (&acc)[64], int gh, int row_g, int t) {
  const int part = gh / a.heads, head = gh % a.heads;
  const float* bias = a.bias + static_cast<int64_t>(part) * a.hidden + head * kQkvHeadDim;
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const int col = 8 * j + 2 * t;
    acc[4 * j + 0] += bias[col];
    acc[4 * j + 1] += bias[col + 1];
    acc[4 * j + 2] += bias[col];
    acc[4 * j + 3] += bias[col + 1];
  }
  if (part == 2) return;
  float ss0 = 0.f, ss1 = 0.f;
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    ss0 += acc[4 * j] * acc[4 * j] + acc[4 * j + 1] * acc[4 * j + 1];
    ss1 += acc[4 * j + 2] * acc[4 * j + 2] + acc[4 * j + 3] * acc[4 * j + 3];
  }
  ss0 += __shfl_xor_sync(0xffffffffu, ss0, 1);
  ss0 += __shfl_xor_sync(0xffffffffu, ss0, 2);
  ss1 += __shfl_xor_sync(0xffffffffu, ss1, 1);
  ss1 += __shfl_xor_sync(0xffffffffu, ss1, 2);
  const float inv0 = rsqrtf(ss0 / float(kQkvHeadDim) + a.eps), inv1 = rsqrtf(ss1 / float(kQkvHeadDim) + a.eps);
  const float* w = part == 0 ? a.q_norm : a.k_norm;
  constexpr int kPairs = kQkvHeadDim / 2;
  const float* cs0 = a.cos + static_cast<int64_t>(row_g) * kPairs;
  const float* sn0 = a.sin + static_cast<int64_t>(row_g) * kPairs;
  const float* cs1 = cs0 + 8 * kPairs;
  const float* sn1 = sn0 + 8 * kPairs;
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const int col = 8 * j + 2 * t, pair = col / 2;
    const float w0 = w[col], w1 = w[col + 1];
    float x0 = acc[4 * j] * inv0 * w0, x1 = acc[4 * j + 1] * inv0 * w1;
    acc[4 * j] = x0 * cs0[pair] - x1 * sn0[pair];
    acc[4 * j + 1] = x0 * sn0[pair] + x1 * cs0[pair];
    x0 = acc[4 * j + 2] * inv1 * w0;
    x1 = acc[4 * j + 3] * inv1 * w1;
    acc[4 * j + 2] = x0 * cs1[pair] - x1 * sn1[pair];
    acc[4 * j + 3] = x0 * sn1[pair] + x1 * cs1[pair];
  }
}

// Stores this warpgroup's 64 rows of one finished head into its owner.
__device__ __forceinline__ void store_head(const QkvArgs& a, const float (&acc)[64], int gh, int row0,
                                           std::uint16_t* staged, int epi_bar, int tid) {
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int part = gh / a.heads, head = gh % a.heads, owner = head / a.heads_per_rank;
  std::uint16_t* dst = a.dst[part][owner];
#pragma unroll
  for (int c = 0; c < 2; ++c) {
    hopper::named_sync(epi_bar, 128);  // the previous chunk's reads of `staged` are done
#pragma unroll
    for (int jj = 0; jj < 8; ++jj) {
      const int j = 8 * c + jj, col = 8 * jj + 2 * t;
      *reinterpret_cast<uint32_t*>(staged + (warp * 16 + g) * kStagePitch + col) =
          pack_bf16x2(acc[4 * j], acc[4 * j + 1]);
      *reinterpret_cast<uint32_t*>(staged + (warp * 16 + g + 8) * kStagePitch + col) =
          pack_bf16x2(acc[4 * j + 2], acc[4 * j + 3]);
    }
    hopper::named_sync(epi_bar, 128);
    for (int i = tid; i < 64 * 8; i += 128) {  // REMOTE STORE when owner != rank
      const int r = i / 8, q = i % 8;
      const int64_t off = qkv_dest_offset(row0 + r, head, a.rank, a.rows_per_rank, a.seq, a.heads_per_rank);
      *reinterpret_cast<uint4*>(dst + off + c * 64 + q * 8) =
          *reinterpret_cast<const uint4*>(staged + r * kStagePitch + q * 8);
    }
  }
}

// Adds `v` to the done counter of each head's owner of launch entry e.
__device__ __forceinline__ void add_entry_counts(const QkvArgs& a, int e, uint32_t v) {
  const int tile = qkv_entry_tile(e), sel = qkv_entry_sel(e), ct = tile % a.col_tiles;
  const int gh0 = 2 * ct, gh1 = 2 * ct + 1;
  const bool second = sel == 0 && gh1 < 3 * a.heads;
#pragma unroll 1
  for (int h = 0; h < (second ? 2 : 1); ++h) {
    const int owner = qkv_owner(h == 0 && sel != 2 ? gh0 : gh1, a.heads, a.heads_per_rank);
    asm volatile("red.relaxed.sys.global.add.u32 [%0], %1;" ::"l"(a.done[owner]), "r"(v) : "memory");
  }
}

// release_by_agent, one thread: walks the CTA's entries; whenever both consumer
// warpgroups counted more tiles than it has released, one fence.acq_rel.sys, then the
// counts of those entries for both warpgroups. The consumers' stores precede their
// barrier and the release add that the acquire load here sees (cumulativity). Idle, it
// sleeps 128 ns doubling to QkvArgs::agent_max_sleep_ns (hopper::agent_wait_past); no
// progress for twice the budget: report and trap.
__device__ void release_agent(const QkvArgs& a, Barriers& bar) {
  uint32_t released = 0;
  int i = blockIdx.x;
#pragma unroll 1
  while (i < a.n_entries) {
    const uint32_t done = hopper::agent_wait_past<kConsumerWGs>(
        bar.tiles_done, released, a.agent_max_sleep_ns, 2 * a.timeout_ns, [] { return comm::global_ns(); }, [&] {
          hopper::report_timeout_and_trap(a.report, reinterpret_cast<const uint64_t*>(bar.tiles_done), released,
                                          static_cast<int>(QkvWaitSite::agent), -1);
        });
    asm volatile("fence.acq_rel.sys;" ::: "memory");
#pragma unroll 1
    for (; released < done && i < a.n_entries; ++released, i += gridDim.x)
      add_entry_counts(a, a.order[i], kConsumerWGs);
  }
}

__device__ void consumer(const QkvArgs& a, uint8_t* smem, Barriers& bar, int wg, int tid) {
  const int lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
  const uint32_t stages_addr = hopper::smem_addr(smem);
  std::uint16_t* staged = reinterpret_cast<std::uint16_t*>(smem + kOffStaging + wg * kStagingBytesPerWG);
  const int epi_bar = 1 + wg;
  const int k_steps = a.hidden / kQkvTileK;
  bool owners_ready = false;
  hopper::RingPos stage;
  float acc0[64], acc1[64];
#pragma unroll 1
  for (int i = blockIdx.x; i < a.n_entries; i += gridDim.x) {
    const bool both = qkv_entry_sel(a.order[i]) == 0;  // a one-head entry multiplies only its box
    hopper::RingPos prev;
#pragma unroll 1
    for (int k = 0; k < k_steps; ++k) {
      wait_stage(a, &bar.full[stage.index], stage.phase, QkvWaitSite::stage_full, stage.index);
      if (both)
        hopper::wgmma::mma_stage_two_b<kQkvTileK, kBoxBytes>(acc0, acc1, stages_addr + stage.index * kStageBytes, wg,
                                                              k == 0);
      else
        hopper::wgmma::mma_stage_one_b<kQkvTileK, kBoxBytes>(acc0, stages_addr + stage.index * kStageBytes, wg, k == 0);
      hopper::wgmma::wait<1>();
      hopper::wgmma::fence_operand(acc0);
      hopper::wgmma::fence_operand(acc1);
      if (k > 0) hopper::mbar_warp_arrive(&bar.empty[prev.index], lane);
      prev = stage;
      stage.advance<kStages>();
    }
    hopper::wgmma::wait<0>();
    hopper::wgmma::fence_operand(acc0);
    hopper::wgmma::fence_operand(acc1);
    hopper::mbar_warp_arrive(&bar.empty[prev.index], lane);
    const int e = a.order[i], tile = qkv_entry_tile(e), sel = qkv_entry_sel(e);
    const int mb = tile / a.col_tiles, ct = tile % a.col_tiles;

    if (!owners_ready) {  // once per launch, before the first store
      if (tid == 0) wait_owners_ready(a);
      hopper::named_sync(epi_bar, 128);
      owners_ready = true;
    }
    const int row0 = mb * kQkvTileRows + wg * 64, row_g = row0 + warp * 16 + g;
    const int gh0 = 2 * ct, gh1 = 2 * ct + 1;
    const bool second = sel == 0 && gh1 < 3 * a.heads;
    {
      const int gh = gh0 + (sel == 2 ? 1 : 0);  // a second-head entry: its head is in acc0
      finish_head(a, acc0, gh, row_g, t);
      store_head(a, acc0, gh, row0, staged, epi_bar, tid);
    }
    if (second) {
      finish_head(a, acc1, gh1, row_g, t);
      store_head(a, acc1, gh1, row0, staged, epi_bar, tid);
    }
    hopper::named_sync(epi_bar, 128);  // every thread's stores of the tile precede the release
    if (tid == 0) {
      if (a.release_by_agent) {
        hopper::smem_add_release(&bar.tiles_done[wg], 1);
      } else {
        asm volatile("fence.acq_rel.sys;" ::: "memory");
        add_entry_counts(a, e, 1u);
      }
    }
  }
}

__global__ void __launch_bounds__(kThreads, 1) qkv_fused_kernel(const __grid_constant__ QkvArgs a) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  auto& bar = *reinterpret_cast<Barriers*>(smem + kOffBar);
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      hopper::mbar_init(&bar.full[s], 1);
      hopper::mbar_init(&bar.empty[s], kConsumerWarps);
    }
#pragma unroll
    for (int w = 0; w < kConsumerWGs; ++w) bar.tiles_done[w] = 0;
    hopper::mbar_init_fence();
  }
  // This rank has started the launch: raise its ready flag on every owner.
  if (blockIdx.x == 0 && threadIdx.x < a.ranks) comm::store_release_sys(a.ready_out[threadIdx.x], a.epoch);
  __syncthreads();
  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    hopper::regs_dealloc<kProducerRegs>();
    if (threadIdx.x == 0) producer(a, smem, bar);
    else if (threadIdx.x == 32 && a.release_by_agent) release_agent(a, bar);
  } else {
    hopper::regs_alloc<kConsumerRegs>();
    consumer(a, smem, bar, wg - 1, threadIdx.x - 128 * wg);
  }
}

}  // namespace qkv_device

void launch_qkv_kernel(const QkvArgs& a, int grid, cudaStream_t stream) {
  XS_CHECK_CUDA(cudaFuncSetAttribute(qkv_device::qkv_fused_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     qkv_device::kSmemBytes));
  qkv_device::qkv_fused_kernel<<<grid, qkv_device::kThreads, qkv_device::kSmemBytes, stream>>>(a);
  XS_CHECK_LAUNCH();
}

}  // namespace xstage::ulysses
