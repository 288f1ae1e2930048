// Ulysses sequence-parallel attention over P ranks: the host-side contract.
// No CUDA include: the layout plan, the exchange plans, the fused tile order
// chosen with the Burst-Gap advisor and the CPU reference build and test
// everywhere. The layer itself is in xstage/ulysses/ulysses_cuda.hpp; the protocol of
// the fused post-attention All-to-All in docs/xstage-ulysses.md.
//
// Shapes (every tensor dense, bf16, the last dimension contiguous):
//   input  on rank r   Q, K, V  [B, S/P, H, D]   sequence rows r·S/P .. (r+1)·S/P - 1, all heads
//   pre-attention A2A           [B, S, H/P, D]   all rows, heads r·H/P .. (r+1)·H/P - 1
//   attention output            [B, S, H/P, D]
//   post-attention A2A output   [B, S/P, H, D]   rank r's rows, all heads; rank r's own
//                                                heads sit at head offset r·H/P
// Rank j receives, from every source rank r, rows of slice j for heads of rank r
// and puts them at head offset r·H/P.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "xstage/attention/attention.hpp"
#include "xstage/burstgap/burstgap.hpp"
#include "xstage/ulysses/geometry.hpp"

namespace xstage::ulysses {

constexpr int kTileRows = 128;  // the attention kernel's CTA tile (block_m)

struct Problem {
  int ranks = 2;                  // P
  int64_t batch = 1;              // B
  int64_t seq = 4096;             // S, the full sequence
  int64_t heads = 24;             // H
  int64_t head_dim = 128;         // D
  bool causal = false;
  // Padding: sequence rows [valid, S) are not tokens (0: every row is). Attention
  // masks them as keys, so no valid row depends on them; as queries they are
  // computed (over the valid keys) and delivered like any row, and the caller
  // ignores them. A sequence whose length does not split into 128-row tiles per
  // rank is padded to one that does (dit::padded_tokens). Not with causal.
  int64_t valid = 0;

  int64_t rows_per_rank() const { return seq / ranks; }    // S/P
  int64_t heads_per_rank() const { return heads / ranks; } // H/P
  int64_t keys() const { return valid > 0 ? valid : seq; } // the rows attention reads as keys
};

// Throws common::Error naming the rule: 1 <= P <= kMaxRanks, P <= visible_gpus
// (when visible_gpus > 0), H % P == 0, S % P == 0, (S/P) % 128 == 0 (an
// attention tile must not straddle two owners' slices), D in {64, 128}, B >= 1,
// 0 <= valid <= S, no padding with causal.
void validate(const Problem& p, int visible_gpus = 0);
std::string describe(const Problem& p);

// What rank r holds before and computes after the pre-attention All-to-All.
struct RankLayout {
  int rank = 0;
  int64_t row0 = 0, rows = 0;    // its sequence slice (input and output rows)
  int64_t head0 = 0, heads = 0;  // the heads it computes attention for
};
RankLayout rank_layout(const Problem& p, int rank);
int owner_of_row(const Problem& p, int64_t row);  // the rank whose slice holds sequence row `row`

// ---- exchange plans ----------------------------------------------------------
// An All-to-All as data: strided local copies (cudaMemcpy2DAsync on the GPU,
// loops on the CPU), then point-to-point transfers (ncclSend/ncclRecv in one
// group), then strided copies out of the receive buffer. All offsets and sizes
// are in elements; buffers are named, so the CPU reference runs the very plan
// the GPU runs.
enum class Buf { input, send, recv, attn, output };
const char* to_string(Buf b);

struct Copy2D {
  Buf src, dst;
  int64_t src_off = 0, dst_off = 0;
  int64_t width = 0, height = 0;         // elements per row, rows
  int64_t src_pitch = 0, dst_pitch = 0;  // elements between rows
};

struct Transfer {  // one peer of one rank: send count from send_buf, receive count into recv_buf
  int peer = 0;
  Buf send_buf = Buf::send, recv_buf = Buf::recv;
  int64_t send_off = 0, recv_off = 0, count = 0;
};

struct ExchangePlan {
  std::vector<Copy2D> before;       // packing (and the rank's own share, copied straight to its place)
  std::vector<Transfer> transfers;  // peers only, ascending peer
  std::vector<Copy2D> after;        // unpacking
  int64_t send_elems = 0, recv_elems = 0;  // staging buffers needed (0: none)
};

// Pre-attention: input [B, S/P, H, D] -> attn_in [B, S, H/P, D] (Buf::attn
// stands for the attention input here). With B = 1 the received chunks land
// in place (no unpack); the send side packs each peer's head slice with one 2-D copy.
ExchangePlan pre_attention_plan(const Problem& p, int rank);
// Post-attention (the serial baseline): attn [B, S, H/P, D] -> output [B, S/P, H, D].
// With B = 1 each peer's rows are contiguous in attn and are sent without packing.
ExchangePlan post_attention_plan(const Problem& p, int rank);
// Chunk k of the coarse-overlap baseline: the rows of slice `owner` only
// (attention run on those rows, chunk by chunk), sent to `owner` (or copied, if local).
// Rank r's chunk order is owner = r+1, r+2, ..., r (local last).
int coarse_chunk_owner(const Problem& p, int rank, int k);

// Executes every rank's plan on host buffers (bf16 bit patterns or floats),
// pairing rank a's transfer to b with b's transfer from a; throws if the
// plans disagree (a count or a missing peer). buffers[r][Buf] per rank.
template <typename T>
void run_plans_on_host(const std::vector<ExchangePlan>& plans, std::vector<std::vector<std::vector<T>>>& buffers);

// Geometry of the fused epilogue on rank r (the device policy uses exactly this).
FusedGeometry fused_geometry(const Problem& p, int rank);

// ---- fused schedule: tile order from the Burst-Gap advisor -------------------
struct TileTimeModel {
  // Per-SM attention rate (TFLOP/s): the measured whole-GPU rates of
  // docs/xstage-attention.md (about 600 at D = 128, 430 at D = 64) over 132 SMs.
  double sm_tflops_d128 = 4.5;
  double sm_tflops_d64 = 3.3;
  double tile_overhead_ns = 500;  // prologue, epilogue staging, scheduler
};
double tile_ns(const Problem& p, const TileTimeModel& m);  // one 128-row tile, all keys (non-causal)
int64_t tile_store_bytes(const Problem& p);                 // 128 rows x D x 2
int owner_row_blocks(const Problem& p);                     // 128-row blocks of one owner: S / 128 / P

struct OrderStats {  // the persistent schedule of one order, simulated on the host
  int sms_remote = 0;        // most CTAs storing remotely in one round
  int bursts = 0;            // remote tiles of the busiest CTA
  double gap_rounds = 0;     // the busiest CTA's mean rounds between its remote tiles
  int remote_last_round = 0; // remote tiles in the last round (local last: few)
  int64_t remote_tiles = 0;
};
OrderStats simulate_order(const Problem& p, int rank, const attention::TileSpace& tiles, int grid);

// The completion signal the layer uses when asked for FusedSignal::automatic, from the
// measurements in docs/xstage-ulysses.md: per_slice at D = 64 (over NVLink on two H200s
// within 1-5 % of attention alone, per_cta 12-17 % over it) and at S >= 32K (per_slice
// 2-3 % faster at 32K with 24 and 40 heads); per_cta at D = 128 below 32K (faster at
// 4K-16K with 24 heads, where each slice's fence waits on its stores for longer than the
// tile computation hides). Those runs predate per_cta's walk-free form, which with all
// targets local on one H200 is no slower than per_slice in all 30 rows; the choice stays
// until remote stores over NVLink say the same.
FusedSignal default_signal(const Problem& p);

// What one fused forward of a source rank adds to each owner's counter for it, so
// what the owner's receiver-complete wait adds to its expectation:
//   per_slice  one per 64-row slice sent to the owner: B x (S/P)/64 x H/P;
//   by_agent   the same (the agent adds each finished tile's slices);
//   per_cta    one per consumer warpgroup that had a tile, to every owner:
//              consumer_wgs x min(grid, tiles), tiles = B x S/128 x H/P;
// `grid` and `consumer_wgs` are the source's own launch (FwdConfig).
uint32_t fused_signals_per_forward(const Problem& p, FusedSignal s, int grid, int consumer_wgs);

struct FusedSchedule {
  attention::TileSpace tiles;       // the order the kernel walks
  int grid = 0;                     // persistent CTAs
  int slice_run = 0;                // 0: head_major (the kernel's default order)
  OrderStats stats;
  burstgap::BurstProfile profile;   // what the advisor was asked
  burstgap::Advice advice;
  double predicted_stall_ns = 0;    // per SM, the kernel's predicted slowdown
  std::string reason;
};
// One order of rank `rank`'s tiles (slice_run 0: head_major, the row-major walk of the
// kernel's default; r > 0: slice_interleaved with runs of r tiles), simulated on `grid`
// CTAs, with the advisor's predicted stall on the link `params` was fitted on.
FusedSchedule evaluate_order(const Problem& p, int rank, int grid, int slice_run, const burstgap::ModelParams& params,
                             const TileTimeModel& time = {});
// Candidates: head_major and slice_interleaved with runs 1, 2, 4, ... up to the
// tiles of one slice. Least predicted stall wins; ties (within 1% of a tile's
// time) go to the fewest remote tiles in the last round, then the shorter run.
// XSTAGE_PRINT_CONFIG=1 prints the choice once per problem.
FusedSchedule choose_schedule(const Problem& p, int rank, int grid, const burstgap::ModelParams& params,
                              const TileTimeModel& time = {});

// Rank `rank`'s tiles owner by owner (TileOrder::owner_major from owner rank + 1, the
// local slice last), each owner's rows in chunks of `chunk_blocks` 128-row blocks (0:
// one chunk per owner): the order of the copy-engine drain over the host link, in which
// each remote owner's chunks are finished, and can leave, while the later ones compute.
// Throws (one line) if chunk_blocks does not divide an owner's row blocks.
attention::TileSpace owner_major_tiles(const Problem& p, int rank, int chunk_blocks = 0);

// ---- CPU reference -----------------------------------------------------------
// The whole layer on the host: each rank's Q, K, V ([B, S/P, H, D] floats) go
// through the pre-attention plan, the fp64 attention reference per rank (keys
// [0, keys()) only), and the post-attention plan. Returns each rank's output [B, S/P, H, D].
std::vector<std::vector<double>> reference_layer(const Problem& p, const std::vector<std::vector<float>>& q,
                                                 const std::vector<std::vector<float>>& k,
                                                 const std::vector<std::vector<float>>& v);

// ---- bench sweep -------------------------------------------------------------
struct BenchConfig {
  int64_t seq = 4096;
  int ranks = 2;
  int64_t heads = 24, head_dim = 128;
  Problem problem() const { return {ranks, 1, seq, heads, head_dim, false}; }
};
// The sweep, S in {4K..128K} x P in {2, 4} x (H, D) in {(24,128), (40,128), (24,64)},
// filtered: seq in [min_seq, max_seq], ranks in `ranks`.
std::vector<BenchConfig> bench_sweep(const std::vector<int>& ranks, int64_t min_seq, int64_t max_seq);

}  // namespace xstage::ulysses
