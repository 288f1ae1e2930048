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
#include "xstage/moe_order.hpp"

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

// Tiles of the fused kernel (TMA + wgmma, docs/xstage-moe.md "The kernel").
// One CTA tile is kTileM token rows, split over two consumer warpgroups (64 rows
// each, the wgmma M). Both tile kinds hold 2 x 128 fp32 columns per warpgroup and
// load three 128 x 64 boxes per K step:
//   L1: 128 columns of I, gate and up together (A = recv rows, B = 128 gate rows
//       + 128 up rows of W1), SwiGLU in the epilogue;
//   L2: 256 columns of hidden (A = H rows, B = two 128-row halves of W2).
inline constexpr int kTileM = 128;    // token rows per tile
inline constexpr int kL1TileN = 128;  // L1 output columns (of I) per tile: 128 gate + 128 up
inline constexpr int kL2TileN = 256;  // L2 output columns (of hidden) per tile
inline constexpr int kTileK = 64;     // reduction step: one 128-byte swizzle panel of bf16
inline constexpr int kBoxRows = 128;  // rows of every TMA box (A: tokens, B: weight rows)
// hidden must be a multiple of the L2 tile, intermediate of the L1 tile (and both
// of kTileK, which they are).
inline constexpr int kHiddenQuantum = kL2TileN;
inline constexpr int kInterQuantum = kL1TileN;

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

// Sizes of the GPU planner's buffers (FusedMoe::route_on_device, moe/device_route.hpp).
namespace route {
inline constexpr int kTopkMax = 8;  // the top-k kernel keeps k <= 8 entries in registers
inline constexpr int kChunk = 512;  // (token, slot) pairs per block of its count and assign kernels
int chunks_per_rank(const Problem& p);           // ceil(T*k / kChunk)
std::size_t chunk_count_size(const Problem& p);  // P * chunks * E
std::size_t plan_table_size(const Problem& p);   // 9 * E/P + 2 ints: the order's tables
// The most rows one rank can receive (each token of every rank at most once per
// local expert and at most k times), the most m blocks of one local expert
// (ceil(P*T / kTileM)), and the most work items an order over max_rows rows has.
int max_recv_rows(const Problem& p);
int max_m_blocks(const Problem& p);
int item_capacity(const Problem& p, int max_rows);
}  // namespace route

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
  std::int32_t n_block;  // kL1TileN columns of I (L1) or kL2TileN of hidden (L2)
  friend bool operator==(const WorkItem&, const WorkItem&) = default;
};
static_assert(sizeof(WorkItem) == 16);

// Tiles of one rank: L1 over (expert, m, n of I), L2 over (expert, m, n of hidden).
struct TileLists {
  int experts = 0;               // local experts
  std::vector<int> m_blocks;     // [experts] ceil(count / kTileM)
  int l1_n_blocks = 0;           // I / kL1TileN
  int l2_n_blocks = 0;           // hidden / kL2TileN
  int raster_group = 1;          // m blocks per raster group (xstage/tile_raster.hpp)
  std::vector<WorkItem> l1, l2;  // expert-major; within an expert grouped raster order
};
// Both kinds of tile read an A block of 128 rows and a B tile of 256 rows over
// the same K, so raster_group(132 SMs, ..., a, 2a) = 16 for every shape.
constexpr int kMoeRasterGroup = 16;
// Tiles of each expert in grouped order (groups of `raster_group` m blocks,
// column by column, m fastest); raster_group 1 is the m-major order.
TileLists build_tiles(const Problem& p, const RankLayout& rank, int raster_group = kMoeRasterGroup);

// Explicit tile-time estimate (assumed, not measured: replace with the rates the
// GPU session measures). 4.5 TFLOP/s per SM is ~600 TFLOP/s over 132 SMs, about
// what a TMA + wgmma mainloop with 128 x 256 tiles sustains on H200.
struct TileTimeModel {
  double sm_tflops = 4.5;        // sustained bf16 per SM of the wgmma mainloop
  double tile_overhead_ns = 800; // dependency wait, pipeline fill, epilogue per tile
};
double l1_tile_ns(const Problem& p, const TileTimeModel& m);  // 2*M*(2N1)*hidden flops
double l2_tile_ns(const Problem& p, const TileTimeModel& m);  // 2*M*N2*I flops
// Bytes one L2 tile's epilogue stores to remote owners (bf16).
inline constexpr std::size_t kL2TileStoreBytes = std::size_t(kTileM) * kL2TileN * 2;

// ============================================================================
// Fused kernel plan (host-visible so that it is CPU-tested; the kernel uses the
// same constants and the same tile_loads())
// ============================================================================

#if defined(__CUDACC__)
#define XS_MOE_HD __host__ __device__
#else
#define XS_MOE_HD
#endif

// Shared memory, threads and registers of one CTA (one per SM, persistent).
struct FusedKernelShape {
  static constexpr int kConsumerWGs = 2;                    // 64 rows each
  static constexpr int kThreads = 128 * (1 + kConsumerWGs); // warpgroup 0 produces
  static constexpr int kConsumerWarps = 4 * kConsumerWGs;
  static constexpr int kProducerRegs = 40;                  // setmaxnreg.dec
  static constexpr int kConsumerRegs = 232;                 // setmaxnreg.inc: 2 x 128 fp32 accumulators
  static constexpr int kBoxBytes = kBoxRows * kTileK * 2;   // 16 KiB: one 128 x 64 bf16 box
  static constexpr int kStageBytes = 3 * kBoxBytes;         // A + B0 + B1
  static constexpr int kStages = 4;                         // K steps in flight
  static constexpr int kItemSlots = 2;                      // work items handed producer -> consumers
  static constexpr int kReleaseSlots = 4;                   // tile releases per consumer warpgroup -> the agent
  static constexpr int kReleaseWarp = 3;                    // producer warpgroup's warp whose lane 0 releases
  static constexpr int kStagePitch = 64 + 8;                // epilogue staging row (elements): 144 B
  static constexpr int kStagingBytesPerWG = 64 * kStagePitch * 2;  // 64 rows x 64 columns per chunk
  static constexpr int kOffStages = 0;
  static constexpr int kOffStaging = kOffStages + kStages * kStageBytes;
  static constexpr int kOffBar = kOffStaging + kConsumerWGs * kStagingBytesPerWG;
  static constexpr int kBarBytes = 1024;  // barriers, item slots, release queues, profile sums
  static constexpr int kSmemBytes = 1024 + kOffBar + kBarBytes;  // + slack to align the base to 1024
  static_assert(kBoxBytes % 1024 == 0, "boxes keep the 1024-byte swizzle alignment");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory over the sm_90 per-block limit");
  static_assert(128 * kProducerRegs + 128 * kConsumerWGs * kConsumerRegs <= 65536, "register file");
  static_assert(kTileM == 64 * kConsumerWGs && kL1TileN == kBoxRows && kL2TileN == 2 * kBoxRows, "tile/box shapes");
};

// Where a profiled fused launch's time went (FusedMoe::set_profile / profile): the mean
// share of each phase over all CTAs, for the consumer warpgroups of their own total
// (start + item_wait + mainloop + epilogue + combine_wait + combine = 1; stage_wait is
// the part of mainloop spent waiting for TMA bytes), and for the producer thread of its
// total. Cycles of the SM clock; total_us converts the consumers' mean total per launch
// at the peak clock (cudaDevAttrClockRate), so it reads low if the card ran slower.
struct KernelProfile {
  int launches = 0;
  double items_per_warpgroup = 0;  // per launch
  double start = 0, item_wait = 0, mainloop = 0, stage_wait = 0, epilogue = 0, combine_wait = 0, combine = 0;
  double producer_dispatch_first = 0, producer_dependency = 0, producer_ring = 0;
  double total_us = 0;
};

// A profiled launch (FusedMoe::set_profile) adds SM clock cycles per CTA and role to
// FusedArgs::profile, [blocks][kProfileRoles][kProfileFields]: role 0 is the producer
// thread, roles 1 and 2 the consumer warpgroups' thread 0. Waits are the cycles from a
// wait's first test to its return.
inline constexpr int kProfileRoles = 3, kProfileFields = 8;
enum class ProducerPhase : int {
  start = 0,       // kernel entry to the start gate passed (LSA barrier, gate)
  dispatch_first,  // the first dispatch pass (thread 0's warp)
  dependency,      // waiting for an item's dispatch rows or L1 row block
  ring,            // waiting for a free item slot or stage
  total            // kernel entry to the producer's end
};
enum class ConsumerPhase : int {
  item = 0,      // waiting for the next work item
  stage,         // waiting for a stage's TMA bytes (inside mainloop)
  mainloop,      // first stage wait to the last wgmma done
  epilogue,      // the last wgmma done to the release queued (or added)
  combine_wait,  // waiting for every row of this rank's tokens
  combine,       // the weighted top-k sum
  items,         // items taken (a count, not cycles)
  total          // kernel entry to the end of the combine
};

// The KernelProfile of `launches` profiled launches from their summed cycles, laid out
// [blocks][kProfileRoles][kProfileFields]; clock_khz converts total_us (0: total_us 0).
// A role whose total is 0 (a CTA that never ran it) is left out; throws (one line) if
// the sums are the wrong size or no role recorded anything.
KernelProfile summarize_profile(const std::vector<unsigned long long>& sums, int blocks, int launches, int clock_khz);

// The four TMA views, all bf16 2-D [rows, cols] row-major with box kBoxRows x kTileK.
struct MapShape {
  const char* name;
  long long rows, cols;
};
struct FusedMaps {
  MapShape recv, h, w1, w2;  // recv [max_rows, hidden], H [max_rows, I], W1 [E/P*2I, hidden], W2 [E/P*hidden, I]
};
// Throws (one line) when a view does not fit TMA's limits (cols*2 a multiple of
// 16 bytes, dims below 2^31, at least one box of columns).
FusedMaps fused_maps(const Problem& p, int max_rows);

// Where one work item's TMA boxes start: A row (recv for L1, H for L2), the two B
// rows (W1 gate/up rows, or the two halves of W2), and how many K steps.
struct TileLoads {
  int a_row, b0_row, b1_row, k_steps;
};
XS_MOE_HD inline TileLoads tile_loads(const WorkItem& it, int expert_first_row, int hidden, int inter) {
  TileLoads t{};
  t.a_row = expert_first_row + it.m_block * kTileM;
  if (it.kind == TileKind::l1) {
    t.b0_row = it.expert * 2 * inter + it.n_block * kL1TileN;  // gate rows
    t.b1_row = t.b0_row + inter;                                // up rows
    t.k_steps = hidden / kTileK;
  } else {
    t.b0_row = it.expert * hidden + it.n_block * kL2TileN;
    t.b1_row = t.b0_row + kBoxRows;
    t.k_steps = inter / kTileK;
  }
  return t;
}

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

// The config's order built tile by tile from the closed form of xstage/moe_order.hpp
// (order_waves, then tile_position per tile), as the GPU planner builds it; equal to
// make_scheduler(c)->order(tiles) (CPU-tested).
std::vector<WorkItem> order_by_position(const TileLists& tiles, const ScheduleConfig& c);
// The OrderSpec of a config for tiles of `p` (column tiles per row block from p).
OrderSpec order_spec(const ScheduleConfig& c, const Problem& p, int raster_group);

// ---- dispatch passes of the fused kernel ------------------------------------
// The kernel dispatches this rank's (token, slot) rows in passes over local expert
// ids (every destination's experts with local id in the pass's range): the first
// pass, [0, first), by all the CTA's warps before the tiles start; the rest,
// [first, first + step), [first + step, ...), by the producer warpgroup's three
// spare warps while the tiles run, each pass releasing its rows' dispatch counters.
// The schedulers take experts in id order, so `first` covers every expert whose L1
// tiles come before the order's first L2 tile, and later passes arrive in the order
// the waves need them. At most kDispatchPasses passes after the first (each pass
// re-reads this CTA's expert ids). first >= experts_local: one pass, all before
// the tiles (no overlap: the kernel's dispatch before 2026-12-01, session 9).
inline constexpr int kDispatchPasses = 8;
struct DispatchPlan {
  int first = 0, step = 1;
};
// From an order: `first` = 1 + the largest local expert of an L1 tile before the
// first L2 tile (all experts when the order has no L2 tile).
DispatchPlan dispatch_plan(const std::vector<WorkItem>& order, int experts_local);
// From a config before the routing is known (the GPU planner's forwards): the
// experts of the first wave (Expert-Wave) or of the first `lag` waves (Interleaved),
// counting every expert as one with rows.
DispatchPlan dispatch_plan(const OrderSpec& spec, int experts_local);
// The same for all experts at once: first = experts_local (no overlap).
DispatchPlan serial_dispatch(int experts_local);

// Tile lists of a layout that gives every local expert the mean count
// P*T*k/E rows (rounded): what a forward whose routing is only known on the GPU
// plans its schedule config with.
TileLists expected_tiles(const Problem& p, int raster_group = kMoeRasterGroup);

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
