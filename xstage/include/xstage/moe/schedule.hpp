// Expert-parallel MoE, tiles and schedules: tile lists, the Expert-Wave and Interleaved
// schedulers behind one interface, the dispatch plan and the Burst-Gap advisor's choice.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "xstage/burstgap/burstgap.hpp"
#include "xstage/moe/layout.hpp"

namespace xstage::moe {

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
  int raster_group = 1;          // m blocks per raster group (xstage/hopper/tile_raster.hpp)
  std::vector<WorkItem> l1, l2;  // expert-major; within an expert grouped raster order
};
// Both kinds of tile read an A block of 128 rows and a B tile of 256 rows over
// the same K, so raster_group(132 SMs, ..., a, 2a) = 16 for every shape.
constexpr int kMoeRasterGroup = 16;
// Tiles of each expert in grouped order (groups of `raster_group` m blocks,
// column by column, m fastest); raster_group 1 is the m-major order.
TileLists build_tiles(const Problem& p, const RankLayout& rank, int raster_group = kMoeRasterGroup);

// Explicit tile-time estimate. A tile takes the longer of its wgmma time and the time
// to stream its weight slab (B operand over all of K) from HBM at its SM's share of the
// bandwidth, plus a fixed overhead. An expert's slab comes from HBM once per raster
// group of its m blocks (the others read it from L2), so with few rows per expert
// (small token counts, many experts) every tile streams its whole slab and the layer is
// bound by its weight bytes, not its FLOPs. 4.5 TFLOP/s per SM is ~600 TFLOP/s over 132
// SMs, about what a TMA + wgmma mainloop with 128 x 256 tiles sustains on H200; 3.5 TB/s
// is what a read-only stream sustains of the H200's 4.8 TB/s HBM3e.
struct TileTimeModel {
  double sm_tflops = 4.5;        // sustained bf16 per SM of the wgmma mainloop
  double tile_overhead_ns = 800; // dependency wait, pipeline fill, epilogue per tile
  double hbm_gbps = 3500;        // weights streamed by all SMs together, GB/s
  int gpu_sms = 132;             // SMs sharing that bandwidth
};
// One tile of an expert with `m_blocks` m blocks (L1: 2*M*(2N1)*hidden flops over a
// 2N1 x hidden slab; L2: 2*M*N2*I flops over an N2 x I slab).
double l1_tile_ns(const Problem& p, const TileTimeModel& m, int m_blocks = kMoeRasterGroup);
double l2_tile_ns(const Problem& p, const TileTimeModel& m, int m_blocks = kMoeRasterGroup);
// Every tile of the lists (each expert's m blocks sharing a slab read within the lists'
// raster group): mean L1 and L2 tile time and the sum over all tiles.
struct TilesTime {
  double l1_mean_ns = 0, l2_mean_ns = 0, total_ns = 0;
};
TilesTime tiles_time(const Problem& p, const TileLists& t, const TileTimeModel& m);
// An order's time on `blocks` persistent CTAs, by a ticket simulation: a CTA takes the
// order's next item when its producer has issued all but the ring's last kStages K
// steps of the current one; an item starts once its CTA is free and, for an L2 item,
// every L1 tile of its row block has ended. Tile times are the tiles' compute (as
// l1/l2_tile_ns without the weight stream); the weight stream bounds the whole from
// below: every slab over the blocks' share of the HBM rate. In ns: the later of the
// two, so the dependency waits and the tail count where the tiles are compute-bound.
// With `l2_end`: each local expert's last L2 tile end (0 without L2 tiles), scaled to the
// whole where the weight stream bounds it.
double order_time_ns(const Problem& p, const TileLists& t, const std::vector<WorkItem>& order, int blocks,
                     const TileTimeModel& m, std::vector<double>* l2_end = nullptr);
// Bytes one L2 tile's epilogue stores to remote owners (bf16), counted as a full tile:
// counting only its valid rows owned by other ranks (far fewer at small token counts)
// predicted almost no stall on the host link where the measured rows show one, as that
// link drains the combine's scattered row stores slower than the probe's fit.
inline constexpr std::size_t kL2TileStoreBytes = std::size_t(kTileM) * kL2TileN * 2;


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

// The config's order built tile by tile from the closed form of xstage/moe/order.hpp
// (order_waves, then tile_position per tile), as the GPU planner builds it; equal to
// make_scheduler(c)->order(tiles) (CPU-tested).
std::vector<WorkItem> order_by_position(const TileLists& tiles, const ScheduleConfig& c);
// The OrderSpec of a config for tiles of `p` (column tiles per row block from p).
OrderSpec order_spec(const ScheduleConfig& c, const Problem& p, int raster_group);

// ---- dispatch passes of the fused kernel ------------------------------------
// The kernel dispatches this rank's (token, slot) rows in passes over local expert
// ids (every destination's experts with local id in the pass's range): the first
// pass, [0, first), by all the CTA's warps before the tiles start; the rest,
// [first, first + step), [first + step, ...), by the producer warpgroup's two
// spare warps while the tiles run, each pass releasing its rows' dispatch counters.
// The schedulers take experts in id order, so `first` covers every expert whose L1
// tiles come before the order's first L2 tile, and later passes arrive in the order
// the waves need them. At most kDispatchPasses passes after the first (each pass
// re-reads this CTA's expert ids). first >= experts_local: one pass, all before
// the tiles (an order without L2 tiles has nothing to overlap).
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
// Both orders' order_time_ns: `interleaved`'s and Expert-Wave's with the same wave, on
// interleaved.sms blocks (no link stall). Their ratio is Interleaved over Expert-Wave.
struct OrderTimes {
  double expert_wave_ns = 0, interleaved_ns = 0;
  double speedup() const { return expert_wave_ns / interleaved_ns; }
};
OrderTimes order_times(const Problem& p, const TileLists& t, const ScheduleConfig& interleaved,
                       const TileTimeModel& m = {});


}  // namespace xstage::moe
