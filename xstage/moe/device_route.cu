// Routing, layout and order of the fused MoE on the GPU (design in device_route.hpp).
#include <cfloat>
#include <climits>

#include "device_route.hpp"
#include "xstage/check_cuda.hpp"
#include "xstage/moe_order.hpp"
#include "xstage/moe_topk.hpp"

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
    int xi = e;
    bool moving = false;
#pragma unroll
    for (int j = 0; j < K; ++j) {
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
  if (lane != 0) return;
  double ex[K];
  float w[K];
  topk_weights(kept, K, ex, w);
#pragma unroll
  for (int j = 0; j < K; ++j) {
    expert[static_cast<std::size_t>(token) * K + j] = kept_id[j];
    weight[static_cast<std::size_t>(token) * K + j] = w[j];
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
  int ranks, rank, experts, epr, chunks, max_rows;
  int* chunk_count;
  int* expert_start;
  int* tables;
  PlanOut out;
};

// One block: prefixes, offsets, dispatch targets and the tables of the tile order
// (one thread fills them: O(experts)); order_kernel then places the tiles.
__global__ void __launch_bounds__(kPlanThreads) scan_kernel(const ScanArgs a) {
  __shared__ int count[kPlanMaxLocal], mb[kPlanMaxLocal], wave[kPlanMaxLocal], l1_off[kPlanMaxLocal],
      l2_off[kPlanMaxLocal], l1_size[kPlanMaxLocal], l2_size[kPlanMaxLocal], l1_start[kPlanMaxLocal],
      l2_start[kPlanMaxLocal], first_tile[kPlanMaxLocal + 1];
  __shared__ int waves;
  __shared__ int total[kPlanMaxExperts];  // rows of each global expert
  const int sc_n = a.ranks * a.chunks;
  // Per global expert: exclusive prefix over (source, chunk), in place; the total.
  // Eight loads in flight at a time (a store between two loads would otherwise keep
  // them in order: the compiler cannot tell the addresses apart).
  for (int e = threadIdx.x; e < a.experts; e += blockDim.x) {
    int run = 0;
    int* col = a.chunk_count + e;
    for (int sc0 = 0; sc0 < sc_n; sc0 += 8) {
      int v[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = sc0 + i < sc_n ? col[static_cast<std::size_t>(sc0 + i) * a.experts] : 0;
#pragma unroll
      for (int i = 0; i < 8; ++i)
        if (sc0 + i < sc_n) col[static_cast<std::size_t>(sc0 + i) * a.experts] = run, run += v[i];
    }
    total[e] = run;
  }
  __syncthreads();
  // Per destination: its experts' first rows (from shared memory: a global load after
  // each store would wait out a full round trip, once per expert).
  if (threadIdx.x < a.ranks) {
    const int d = threadIdx.x;
    int run = 0;
    for (int el = 0; el < a.epr; ++el) {
      const int t = total[d * a.epr + el];
      a.expert_start[d * a.epr + el] = run;
      if (d == a.rank) count[el] = t, a.out.expert_offset[el] = run;
      run += t;
    }
    if (d == a.rank) a.out.expert_offset[a.epr] = run;
  }
  __syncthreads();
  for (int el = threadIdx.x; el < a.epr; el += blockDim.x) {
    a.out.dispatch_expect[el] += static_cast<unsigned>(count[el]);
    mb[el] = (count[el] + kTileM - 1) / kTileM;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    waves = order_waves(a.spec, a.epr, mb, wave, l1_off, l2_off, l1_size, l2_size, l1_start, l2_start);
    int run = 0;
    for (int el = 0; el < a.epr; ++el) first_tile[el] = run, run += mb[el] * (a.spec.l1_n_blocks + a.spec.l2_n_blocks);
    first_tile[a.epr] = run;
    *a.out.n_items = run;
  }
  __syncthreads();
  // The tables for the order kernel (Tables below).
  int* g = a.tables;
  for (int el = threadIdx.x; el < a.epr; el += blockDim.x) {
    g[el] = mb[el], g[a.epr + el] = wave[el], g[2 * a.epr + el] = l1_off[el], g[3 * a.epr + el] = l2_off[el];
    g[4 * a.epr + el] = first_tile[el];
    g[5 * a.epr + 1 + el] = l1_size[el], g[6 * a.epr + 1 + el] = l2_size[el];
    g[7 * a.epr + 1 + el] = l1_start[el], g[8 * a.epr + 1 + el] = l2_start[el];
  }
  if (threadIdx.x == 0) g[5 * a.epr] = first_tile[a.epr], g[9 * a.epr + 1] = waves;
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
  ScanArgs a{spec,  p.ranks, rank, p.experts, epr, chunks, max_rows, scratch.chunk_count, scratch.expert_start,
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
