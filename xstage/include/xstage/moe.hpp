// Expert-parallel MoE: problem, routing, dispatch/combine layout, tile lists,
// schedules and a host reference. Host C++, no GPU (the fused kernel and its
// launcher are xstage/moe/sm90_moe_fused.*; docs/xstage-moe.md has the design).
//
// Shapes (per rank r of P; E experts, E/P on each rank; top-k routing):
//   x       [T, hidden]            bf16, rank r's tokens
//   routing [T, k]                 expert id (global) and weight per (token, slot)
//   W1      [E/P, 2*I, hidden]     bf16, rows 0..I-1 gate, I..2I-1 up (K-major)
//   W2      [E/P, hidden, I]       bf16 (K-major)
//   recv    [rows_r, hidden]       rows dispatched to rank r, grouped by local expert,
//                                  then by source rank, then by (token, slot)
//   H       [rows_r, I]            SwiGLU(gate, up), bf16
//   comb    [T*k, hidden]          on the token's owner: expert output of (token, slot)
//   out     [T, hidden]            bf16, sum_k weight * comb (fp32 sum, one rounding)
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "xstage/burstgap.hpp"

namespace xstage::moe {

// ============================================================================
// bf16 on the host (round to nearest even; NaN stays NaN)
// ============================================================================

using bf16_bits = std::uint16_t;
bf16_bits to_bf16(float f);
float from_bf16(bf16_bits b);
inline float round_bf16(float f) { return from_bf16(to_bf16(f)); }

// ============================================================================
// Problem
// ============================================================================

// Tile of the fused kernel (first version: mma.sync m16n8k16, docs/xstage-moe.md).
inline constexpr int kTileM = 64;   // token rows per tile
inline constexpr int kTileN = 64;   // output columns per tile (L1: 64 gate + 64 up)
inline constexpr int kTileK = 32;   // reduction step
// hidden and intermediate must be multiples of this (the N tile of L2 / L1).
inline constexpr int kShapeQuantum = kTileN;

struct Problem {
  int ranks = 2;              // P, one per GPU
  int tokens_per_rank = 128;  // T
  int experts = 8;            // E (global)
  int topk = 2;               // k
  int hidden = 256;
  int intermediate = 128;     // I
  int experts_per_rank() const { return experts / ranks; }
};

// Throws common::Error with a one-line message naming the field and the rule.
// visible_gpus < 0 skips the GPU-count check (host-only use).
void validate(const Problem& p, int visible_gpus = -1);
std::string describe(const Problem& p);  // "P2 T128 E8 k2 h256 I128"

// ============================================================================
// Routing
// ============================================================================

// One rank's routing: expert ids (global, distinct per token) and weights.
struct Routing {
  int tokens = 0, topk = 0;
  std::vector<int> expert;     // [tokens * topk]
  std::vector<float> weight;   // [tokens * topk]
};

// Softmax over the top-k logits of each token (= softmax over all experts,
// renormalised over the chosen k). Ties go to the lower expert id.
// logits: [tokens, experts].
Routing route_from_logits(const std::vector<float>& logits, int tokens, int experts, int topk);

struct SyntheticRouting {
  double zipf = 0;             // expert popularity ~ 1/(rank+1)^zipf; 0 = uniform
  int empty_experts = 0;       // this many experts (chosen by seed) receive no token
  double same_rank = 0;        // probability that slot j>0 picks an expert on slot 0's rank
  std::uint64_t seed = 1;
};
// Routing of every rank (one Routing per rank), deterministic in (problem, s).
std::vector<Routing> synthetic_routing(const Problem& p, const SyntheticRouting& s);
// Throws when ids are out of range, repeated within a token, or weights not finite.
void validate(const Problem& p, const std::vector<Routing>& routing);

// ============================================================================
// Dispatch and combine layout
// ============================================================================

// Everything one rank's part of the fused kernel indexes by. Built on the host
// from every rank's routing (the reference path routes on the host too).
struct RankLayout {
  int rank = 0;
  // Send side: for each (token, slot) of this rank, where its row goes.
  std::vector<int> send_rank;      // [T*k] destination rank
  std::vector<int> send_row;       // [T*k] row in the destination's recv buffer
  // Receive side: rows grouped by local expert.
  std::vector<int> expert_offset;  // [E/P + 1] first recv row of each local expert
  std::vector<int> recv_src_rank;  // [rows] owner of the token
  std::vector<int> recv_src_slot;  // [rows] token * k + slot on the owner (its comb row)
  std::vector<int> recv_from;      // [P] rows this rank receives from each source
  int rows() const { return expert_offset.empty() ? 0 : expert_offset.back(); }
  int count(int local_expert) const { return expert_offset[local_expert + 1] - expert_offset[local_expert]; }
};

struct Layout {
  Problem problem;
  std::vector<RankLayout> ranks;
  int max_rows() const;                       // most rows any rank receives
};
Layout build_layout(const Problem& p, const std::vector<Routing>& routing);
// Structural invariants (every (token, slot) sent once, maps inverse, offsets
// monotone); throws naming the first broken one.
void check_layout(const Layout& layout, const std::vector<Routing>& routing);

// Host model of the kernel's data movement over `row_elems` elements per row
// (bit copies): dispatch x rows to recv buffers, and return recv-shaped rows to
// the owners' comb buffers [T*k, row_elems].
std::vector<std::vector<bf16_bits>> dispatch_rows(const Layout& layout, const std::vector<std::vector<bf16_bits>>& x,
                                                  int row_elems);
std::vector<std::vector<bf16_bits>> combine_rows(const Layout& layout,
                                                 const std::vector<std::vector<bf16_bits>>& recv, int row_elems);

// ============================================================================
// Tiles and schedules
// ============================================================================

enum class TileKind : std::int32_t { l1 = 0, l2 = 1 };

// One unit of the persistent kernel's work (4 ints: uploaded as is).
struct WorkItem {
  TileKind kind;
  std::int32_t expert;   // local expert
  std::int32_t m_block;  // kTileM rows of that expert's recv rows
  std::int32_t n_block;  // kTileN columns of I (L1) or hidden (L2)
  friend bool operator==(const WorkItem&, const WorkItem&) = default;
};
static_assert(sizeof(WorkItem) == 16);

// Tiles of one rank: L1 over (expert, m, n of I), L2 over (expert, m, n of hidden).
struct TileLists {
  int experts = 0;               // local experts
  std::vector<int> m_blocks;     // [experts] ceil(count / kTileM)
  int l1_n_blocks = 0;           // I / kTileN
  int l2_n_blocks = 0;           // hidden / kTileN
  std::vector<WorkItem> l1, l2;  // expert-major, then m, then n
};
TileLists build_tiles(const Problem& p, const RankLayout& rank);

// Explicit tile-time estimate (assumed, not measured: the first kernel is
// mma.sync; replace with measured rates when the GPU session has them).
struct TileTimeModel {
  double sm_tflops = 2.5;        // sustained bf16 per SM for the first kernel (~1/3 of wgmma peak)
  double tile_overhead_ns = 400; // loads, waits, epilogue bookkeeping per tile
};
double l1_tile_ns(const Problem& p, const TileTimeModel& m);  // 2*M*(2N)*hidden flops
double l2_tile_ns(const Problem& p, const TileTimeModel& m);  // 2*M*N*I flops
// Bytes one L2 tile's epilogue stores to remote owners (bf16).
inline constexpr std::size_t kL2TileStoreBytes = std::size_t(kTileM) * kTileN * 2;

enum class ScheduleKind { expert_wave, interleaved };
const char* to_string(ScheduleKind k);
ScheduleKind parse_schedule(const std::string& s);  // "expert_wave" | "interleaved"

struct ScheduleConfig {
  ScheduleKind kind = ScheduleKind::expert_wave;
  int sms = 132;            // persistent blocks (one per SM)
  int wave_experts = 1;     // local experts per wave
  int lag = 1;              // interleaved: L2 of wave w runs among L1 of wave w+lag
  int burst_split = 1;      // interleaved: L2 tiles of a wave in this many pieces
  std::string reason;       // why (occupancy heuristic and advisor text)
};

// The one interface: an ordered global work list (blocks take items in this
// order through a ticket counter, so an item's dependencies always come earlier).
class Scheduler {
 public:
  virtual ~Scheduler() = default;
  virtual ScheduleKind kind() const = 0;
  virtual std::vector<WorkItem> order(const TileLists& tiles) const = 0;
};

// Per wave: all L1 tiles, then all L2 tiles (the usual MegaMoE order).
class ExpertWaveScheduler final : public Scheduler {
 public:
  explicit ExpertWaveScheduler(int wave_experts);
  ScheduleKind kind() const override { return ScheduleKind::expert_wave; }
  std::vector<WorkItem> order(const TileLists& tiles) const override;

 private:
  int wave_experts_;
};

// L1 of waves 0..lag-1 first; then for each wave w, its L2 tiles cut into
// burst_split pieces, each followed by a piece of wave w+lag's L1 tiles.
class InterleavedScheduler final : public Scheduler {
 public:
  InterleavedScheduler(int wave_experts, int lag, int burst_split);
  ScheduleKind kind() const override { return ScheduleKind::interleaved; }
  std::vector<WorkItem> order(const TileLists& tiles) const override;

 private:
  int wave_experts_, lag_, burst_split_;
};

std::unique_ptr<Scheduler> make_scheduler(const ScheduleConfig& c);

// Every tile exactly once and every L2 (e, m) after all L1 (e, m, *); throws.
void check_order(const TileLists& tiles, const std::vector<WorkItem>& order);

// Wave size from occupancy: the fewest experts whose L1 tiles fill every SM
// at least once (so a wave's L1 phase is never partly idle).
int occupancy_wave_experts(const TileLists& tiles, int sms);

// Chooses the config of `kind` for one rank's tiles. Interleaved asks the
// Burst-Gap advisor (see plan.cpp for the reasoning). With XSTAGE_PRINT_CONFIG=1
// prints the choice once per distinct (problem, kind).
ScheduleConfig choose_schedule(ScheduleKind kind, const Problem& p, const TileLists& tiles, int sms,
                               const burstgap::ModelParams& params, const TileTimeModel& time = {});
// The burst profile an order emits for the advisor: bytes per SM per burst and
// compute between bursts, from the tile-time estimate.
burstgap::BurstProfile burst_profile(const ScheduleConfig& c, const Problem& p, const TileLists& tiles,
                                     const TileTimeModel& time);

// ============================================================================
// Host reference (small shapes)
// ============================================================================

// Weights of every rank: w1[r] = [E/P, 2I, hidden], w2[r] = [E/P, hidden, I] (bf16).
struct Weights {
  std::vector<std::vector<bf16_bits>> w1, w2;
};
Weights random_weights(const Problem& p, std::uint64_t seed, float scale = 0.05f);
std::vector<std::vector<bf16_bits>> random_tokens(const Problem& p, std::uint64_t seed, float scale = 1.0f);

// dispatch -> W1 gate/up -> SwiGLU -> W2 -> weighted combine, through the layout,
// accumulating in fp64 and rounding to bf16 where the kernel stores bf16 (H, comb,
// out). Returns out[r] = [T, hidden] as float (exact bf16 values).
std::vector<std::vector<float>> reference_forward(const Problem& p, const std::vector<Routing>& routing,
                                                  const Layout& layout, const Weights& w,
                                                  const std::vector<std::vector<bf16_bits>>& x);
// Token by token, no layout (for testing the one above).
std::vector<std::vector<float>> naive_forward(const Problem& p, const std::vector<Routing>& routing, const Weights& w,
                                              const std::vector<std::vector<bf16_bits>>& x);

}  // namespace xstage::moe
