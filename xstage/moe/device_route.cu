// Routing, layout and order of the fused MoE on the GPU (design in device_route.hpp).
#include <cfloat>
#include <climits>
#include <cub/block/block_scan.cuh>

#include "xstage/moe/device_route.hpp"
#include "common/cuda_check.hpp"
#include "xstage/moe/order.hpp"
#include "xstage/moe/topk.hpp"

namespace xstage::moe::route {

namespace {

constexpr int kPlanThreads = 1024;
constexpr int kPlanMaxLocal = 512;  // = kMaxLocalExperts of the fused kernel
constexpr int kPlanMaxExperts = kPlanMaxLocal * 8;  // over at most 8 ranks

// One warp per token. Lane l keeps the top-K of experts l, l + 32, ... by the
// insertion rule of moe_topk.hpp (larger logit first, ties to the lower id), as a
// shift register (no dynamic indexing, so no local memory); then K rounds pick the
// warp's best head (value, then lower id; a butterfly, so every lane agrees) and its
// lane shifts. That is the same selection as the sequential insertion over all experts.
template <int K>
__global__ void topk_kernel(const float* logits, int tokens, int experts, int* expert, float* weight,
                            int* nonfinite) {
  const int token = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  if (token >= tokens) return;  // a whole warp
  const float* l = logits + static_cast<std::size_t>(token) * experts;
  float val[K];
  int idx[K];
#pragma unroll
  for (int j = 0; j < K; ++j) val[j] = -INFINITY, idx[j] = INT_MAX;
  bool bad = false;
  for (int e = lane; e < experts; e += 32) {
    float x = l[e];
    if (!isfinite(x)) {
      bad = true;
      x = x > 0.f ? FLT_MAX : -FLT_MAX;  // NaN compares false: -FLT_MAX
    }
    topk_insert(x, e, K, val, idx);
  }
  float kept[K];
  int kept_id[K];
#pragma unroll
  for (int r = 0; r < K; ++r) {
    float bv = val[0];
    int bi = idx[0];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
      if (ov > bv || (ov == bv && oi < bi)) bv = ov, bi = oi;
    }
    kept[r] = bv;
    kept_id[r] = bi;
    if (idx[0] == bi) {  // this lane's head was taken
#pragma unroll
      for (int j = 0; j + 1 < K; ++j) val[j] = val[j + 1], idx[j] = idx[j + 1];
      val[K - 1] = -INFINITY, idx[K - 1] = INT_MAX;
    }
  }
  if (bad) *nonfinite = 1;
  // The weights as topk_weights computes them (ex[0] = 1, ex[j] = exp(kept[j] - kept[0])
  // in double, summed in slot order, each ex[j] / sum rounded to float), with slot j's
  // double exp and division on lane j: one of each per lane instead of K - 1 exps and K
  // divisions on lane 0 while the other lanes idle (double math is slow on one lane).
  double arg = 0.0;
  int mine_id = 0;
#pragma unroll
  for (int j = 0; j < K; ++j)
    if (lane == j) arg = double(kept[j]) - double(kept[0]), mine_id = kept_id[j];
  const double ex = lane == 0 ? 1.0 : ::exp(arg);
  double sum = 1.0;
#pragma unroll
  for (int j = 1; j < K; ++j) sum += __shfl_sync(0xffffffffu, ex, j);
  if (lane < K) {
    expert[static_cast<std::size_t>(token) * K + lane] = mine_id;
    weight[static_cast<std::size_t>(token) * K + lane] = static_cast<float>(ex / sum);
  }
}

// grid (chunks, P): per-expert counts of one chunk of one source.
__global__ void count_kernel(const int* all_expert, int tk, int chunks, int experts, int* chunk_count) {
  extern __shared__ int hist[];
  const int c = blockIdx.x, s = blockIdx.y;
  for (int e = threadIdx.x; e < experts; e += blockDim.x) hist[e] = 0;
  __syncthreads();
  const int i = c * kChunk + threadIdx.x;
  if (i < tk) atomicAdd(&hist[all_expert[static_cast<std::size_t>(s) * tk + i]], 1);
  __syncthreads();
  int* row = chunk_count + (static_cast<std::size_t>(s) * chunks + c) * experts;
  for (int e = threadIdx.x; e < experts; e += blockDim.x) row[e] = hist[e];
}

struct ScanArgs {
  OrderSpec spec;
  int ranks, rank, experts, epr, chunks;
  int* chunk_count;
  int* expert_start;
  int* tables;
  PlanOut out;
};

using BlockScan = cub::BlockScan<int, kPlanThreads>;

// Exclusive sum of one value per thread over the block (every thread calls it; `sum`
// gets the total).
__device__ __forceinline__ int block_exclusive_sum(BlockScan::TempStorage& tmp, int v, int& sum) {
  int out = 0;
  BlockScan(tmp).ExclusiveSum(v, out, sum);
  __syncthreads();  // tmp is reused by the next call
  return out;
}

// Per global expert: the exclusive prefix over (source, chunk) of chunk_count, in
// place, and the expert's total rows. Eight loads in flight at a time (a store between
// two loads would otherwise keep them in order: the compiler cannot tell the addresses
// apart).
__device__ __forceinline__ void chunk_prefixes(const ScanArgs& a, int* total) {
  const int sc_n = a.ranks * a.chunks;
  for (int e = threadIdx.x; e < a.experts; e += blockDim.x) {
    int run = 0;
    int* col = a.chunk_count + e;
    for (int sc0 = 0; sc0 < sc_n; sc0 += 8) {
      int v[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) v[k] = sc0 + k < sc_n ? col[static_cast<std::size_t>(sc0 + k) * a.experts] : 0;
#pragma unroll
      for (int k = 0; k < 8; ++k)
        if (sc0 + k < sc_n) col[static_cast<std::size_t>(sc0 + k) * a.experts] = run, run += v[k];
    }
    total[e] = run;
  }
}

// Where each wave's L1 and L2 lists start in the order (thread w: wave w): Expert-Wave
// puts a wave's L1 list before its L2 list; Interleaved starts with the first `lag`
// waves' L1 lists, then wave w's L2 list followed by wave w + lag's L1 list.
__device__ __forceinline__ void wave_list_starts(BlockScan::TempStorage& tmp, const OrderSpec& spec, int waves,
                                                 const int* l1_size, const int* l2_size, int* l1_start,
                                                 int* l2_start) {
  const int i = threadIdx.x;
  if (!spec.interleaved) {
    int all = 0;
    const int start = block_exclusive_sum(tmp, i < waves ? l1_size[i] + l2_size[i] : 0, all);
    if (i < waves) l1_start[i] = start, l2_start[i] = start + l1_size[i];
    return;
  }
  const int lag = spec.lag;
  int prologue = 0, all = 0;
  const int pro = block_exclusive_sum(tmp, i < waves && i < lag ? l1_size[i] : 0, prologue);
  const int step =
      block_exclusive_sum(tmp, i < waves ? l2_size[i] + (i + lag < waves ? l1_size[i + lag] : 0) : 0, all);
  if (i < waves && i < lag) l1_start[i] = pro;
  if (i < waves) {
    l2_start[i] = prologue + step;
    if (i + lag < waves) l1_start[i + lag] = prologue + step;
  }
}

// One block: prefixes, offsets, dispatch targets and the tables of the tile order,
// by block-wide scans (thread el holds local expert el, thread w wave w; epr <= 512
// < 1024 threads); order_kernel then places the tiles. The tables are those of
// order_waves() (moe_order.hpp), which the GPU test checks through the order.
__global__ void __launch_bounds__(kPlanThreads) scan_kernel(const ScanArgs a) {
  __shared__ BlockScan::TempStorage scan_tmp;
  __shared__ int count[kPlanMaxLocal], mb[kPlanMaxLocal], wave[kPlanMaxLocal], l1_off[kPlanMaxLocal],
      l2_off[kPlanMaxLocal], l1_size[kPlanMaxLocal], l2_size[kPlanMaxLocal], l1_start[kPlanMaxLocal],
      l2_start[kPlanMaxLocal], first_tile[kPlanMaxLocal + 1], pl1[kPlanMaxLocal + 1], pl2[kPlanMaxLocal + 1],
      wave_first[kPlanMaxLocal];
  __shared__ int total[kPlanMaxExperts];  // rows of each global expert
  const int i = threadIdx.x, epr = a.epr;
  const bool mine = i < epr;
  const auto excl = [&](int v, int& sum) { return block_exclusive_sum(scan_tmp, v, sum); };
  chunk_prefixes(a, total);
  __syncthreads();
  // Per destination: its experts' first rows.
  for (int d = 0; d < a.ranks; ++d) {
    const int v = mine ? total[d * epr + i] : 0;
    int rows = 0;
    const int off = excl(v, rows);
    if (mine) a.expert_start[d * epr + i] = off;
    if (d == a.rank) {
      if (mine) count[i] = v, a.out.expert_offset[i] = off;
      if (i == 0) a.out.expert_offset[epr] = rows;
    }
  }
  __syncthreads();
  // m blocks, dispatch targets; waves over the experts with rows.
  const int m_blocks = mine ? (count[i] + kTileM - 1) / kTileM : 0;
  if (mine) a.out.dispatch_expect[i] += static_cast<unsigned>(count[i]), mb[i] = m_blocks;
  const bool busy = m_blocks > 0;
  int n_busy = 0;
  const int rank_busy = excl(busy ? 1 : 0, n_busy);
  const int we = a.spec.wave_experts, waves = (n_busy + we - 1) / we;
  if (mine) wave[i] = busy ? rank_busy / we : -1;
  if (busy && rank_busy % we == 0) wave_first[rank_busy / we] = i;
  int t1 = 0, t2 = 0;
  const int p1 = excl(m_blocks * a.spec.l1_n_blocks, t1), p2 = excl(m_blocks * a.spec.l2_n_blocks, t2);
  if (mine) pl1[i] = p1, pl2[i] = p2;
  if (i == 0) pl1[epr] = t1, pl2[epr] = t2;
  __syncthreads();
  if (mine) {
    const int f = busy ? wave_first[wave[i]] : i;
    l1_off[i] = busy ? p1 - pl1[f] : 0;
    l2_off[i] = busy ? p2 - pl2[f] : 0;
  }
  if (i < waves) {
    const int f = wave_first[i], next = i + 1 < waves ? wave_first[i + 1] : epr;
    l1_size[i] = pl1[next] - pl1[f];
    l2_size[i] = pl2[next] - pl2[f];
  }
  __syncthreads();
  wave_list_starts(scan_tmp, a.spec, waves, l1_size, l2_size, l1_start, l2_start);
  // First tile of each expert in the expert-major tile numbering; the item count.
  int n_tiles = 0;
  const int ft = excl(m_blocks * (a.spec.l1_n_blocks + a.spec.l2_n_blocks), n_tiles);
  if (mine) first_tile[i] = ft;
  if (i == 0) first_tile[epr] = n_tiles, *a.out.n_items = n_tiles;
  __syncthreads();
  // The tables for the order kernel (Tables below).
  int* g = a.tables;
  if (mine) {
    g[i] = mb[i], g[epr + i] = wave[i], g[2 * epr + i] = l1_off[i], g[3 * epr + i] = l2_off[i];
    g[4 * epr + i] = first_tile[i];
    g[5 * epr + 1 + i] = l1_size[i], g[6 * epr + 1 + i] = l2_size[i];
    g[7 * epr + 1 + i] = l1_start[i], g[8 * epr + 1 + i] = l2_start[i];
  }
  if (i == 0) g[5 * epr] = first_tile[epr], g[9 * epr + 1] = waves;
}

// The per-expert and per-wave tables of the order, in global memory (route::plan_table_size).
struct Tables {
  const int *mb, *wave, *l1_off, *l2_off, *first_tile, *l1_size, *l2_size, *l1_start, *l2_start;
  int waves;
  __device__ Tables(const int* g, int epr)
      : mb(g), wave(g + epr), l1_off(g + 2 * epr), l2_off(g + 3 * epr), first_tile(g + 4 * epr),
        l1_size(g + 5 * epr + 1), l2_size(g + 6 * epr + 1), l1_start(g + 7 * epr + 1), l2_start(g + 8 * epr + 1),
        waves(g[9 * epr + 1]) {}
};

// One thread per tile (grid over the item capacity; threads past n_items exit): the
// tile's place in the order.
__global__ void order_kernel(const OrderSpec spec, int epr, const int* tables, const int* n_items, WorkItem* items) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= *n_items) return;
  const Tables T(tables, epr);
  int lo = 0, hi = epr - 1;  // the expert whose tiles hold t: last first_tile <= t
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (T.first_tile[mid] <= t) lo = mid; else hi = mid - 1;
  }
  const int e = lo, j = t - T.first_tile[e], mb = T.mb[e], l1n = mb * spec.l1_n_blocks;
  const bool l2 = j >= l1n;
  const int jj = l2 ? j - l1n : j;
  int m = 0, col = 0;
  grouped_tile(jj, mb, l2 ? spec.l2_n_blocks : spec.l1_n_blocks, spec.raster_group, &m, &col);
  const int pos = tile_position(spec, T.waves, l2, T.wave[e], (l2 ? T.l2_off[e] : T.l1_off[e]) + jj, T.l1_size,
                                T.l2_size, T.l1_start, T.l2_start);
  items[pos] = WorkItem{l2 ? TileKind::l2 : TileKind::l1, e, m, col};
}

// grid (chunks, P): each pair's row in its destination's recv buffer.
__global__ void __launch_bounds__(kChunk) assign_kernel(const int* all_expert, int tk, int chunks, int experts,
                                                        int epr, int rank, const int* chunk_base,
                                                        const int* expert_start, PlanOut out) {
  __shared__ int se[kChunk];
  const int c = blockIdx.x, s = blockIdx.y, i = c * kChunk + threadIdx.x;
  const int e = i < tk ? all_expert[static_cast<std::size_t>(s) * tk + i] : -1;
  se[threadIdx.x] = e;
  __syncthreads();
  if (e < 0) return;
  int before = 0;  // earlier pairs of this chunk with the same expert (broadcast reads)
  for (int j = 0; j < static_cast<int>(threadIdx.x); ++j) before += se[j] == e;
  const int row =
      expert_start[e] + chunk_base[(static_cast<std::size_t>(s) * chunks + c) * experts + e] + before;
  const int d = e / epr;
  if (s == rank) out.send_rank[i] = d, out.send_row[i] = row;
  if (d == rank) out.recv_src_rank[row] = s, out.recv_src_slot[row] = i;
}

}  // namespace

void topk_softmax(const float* logits, int tokens, int experts, int topk, int* expert, float* weight, int* nonfinite,
                  cudaStream_t s) {
  XS_CHECK_MSG(tokens >= 0 && topk >= 1 && topk <= kTopkMax && topk <= experts && nonfinite,
               "moe routing kernel: needs 1 <= top-k <= min(experts, 8) and a flag");
  if (tokens == 0) return;
  const int threads = 256, blocks = (tokens + threads / 32 - 1) / (threads / 32);  // a warp per token
  switch (topk) {
#define XS_TOPK_CASE(K)                                                                          \
  case K:                                                                                        \
    topk_kernel<K><<<blocks, threads, 0, s>>>(logits, tokens, experts, expert, weight, nonfinite); \
    break;
    XS_TOPK_CASE(1) XS_TOPK_CASE(2) XS_TOPK_CASE(3) XS_TOPK_CASE(4)
    XS_TOPK_CASE(5) XS_TOPK_CASE(6) XS_TOPK_CASE(7) XS_TOPK_CASE(8)
#undef XS_TOPK_CASE
  }
  XS_CHECK_LAUNCH();
}

void plan(const Problem& p, int rank, const int* all_expert, const OrderSpec& spec, int max_rows,
          const PlanScratch& scratch, const PlanOut& out, cudaStream_t s, cudaEvent_t* marks) {
  const auto mark = [&](int i) {
    if (marks) XS_CHECK_CUDA(cudaEventRecord(marks[i], s));
  };
  const int epr = p.experts_per_rank(), tk = p.tokens_per_rank * p.topk, chunks = chunks_per_rank(p);
  XS_CHECK_MSG(epr <= kPlanMaxLocal && p.experts <= kPlanMaxExperts,
               "moe routing kernel: at most 512 experts per rank and 4096 in all");
  XS_CHECK_MSG(rank >= 0 && rank < p.ranks, "moe routing kernel: rank outside 0 .. P-1");
  XS_CHECK_MSG(max_rows >= max_recv_rows(p), "moe routing kernel: recv rows sized below the most a rank can get");
  XS_CHECK_MSG(spec.wave_experts >= 1 && spec.lag >= 1 && spec.split >= 1 && spec.raster_group >= 1 &&
                   spec.l1_n_blocks == p.intermediate / kL1TileN && spec.l2_n_blocks == p.hidden / kL2TileN,
               "moe routing kernel: the order spec does not fit the problem");
  const dim3 grid(chunks, p.ranks);
  count_kernel<<<grid, kChunk, p.experts * sizeof(int), s>>>(all_expert, tk, chunks, p.experts, scratch.chunk_count);
  XS_CHECK_LAUNCH();
  mark(0);
  ScanArgs a{spec,  p.ranks, rank, p.experts, epr, chunks, scratch.chunk_count, scratch.expert_start,
             scratch.tables, out};
  scan_kernel<<<1, kPlanThreads, 0, s>>>(a);
  XS_CHECK_LAUNCH();
  mark(1);
  const int cap = item_capacity(p, max_rows), per_block = 256;
  order_kernel<<<(cap + per_block - 1) / per_block, per_block, 0, s>>>(spec, epr, scratch.tables, out.n_items,
                                                                       out.items);
  XS_CHECK_LAUNCH();
  mark(2);
  assign_kernel<<<grid, kChunk, 0, s>>>(all_expert, tk, chunks, p.experts, epr, rank, scratch.chunk_count,
                                        scratch.expert_start, out);
  XS_CHECK_LAUNCH();
  mark(3);
}

}  // namespace xstage::moe::route
