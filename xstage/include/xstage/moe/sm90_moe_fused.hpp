// Host side of the fused EP MoE kernel (xstage/moe/sm90_moe_fused.cu[h]).
//
// One FusedMoe per rank. Collective construction (window + device communicator),
// then per forward: set_inputs (tokens, routing, layout, schedule order), launch.
// Shared-window layout (same offsets on every rank):
//   [0, 4 KiB)            flags: dispatch counters [E/P], the combine counter, the drain flags [P]
//   [recv_off, ...)       recv [max_rows, hidden] bf16  (written by sources' dispatch)
//   [comb_off, ...)       comb [T*k, hidden] bf16      (written by experts' L2 epilogues)
// Counters only grow: the host keeps the cumulative value each launch must reach
// (dispatch: sum of this rank's per-expert counts so far; combine: epoch*T*k*hidden/64).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include "common/device_buffer.hpp"
#include "xstage/moe/moe.hpp"
#include "xstage/sync/report.hpp"

namespace xstage::comm {
class Rank;
class SymmetricWindow;
class DeviceComm;
}  // namespace xstage::comm

namespace xstage::moe {

inline constexpr int kFusedThreads = FusedKernelShape::kThreads;  // producer + 2 consumer warpgroups
inline constexpr int kMaxLocalExperts = 512;     // flags area: 4 KiB of counters
inline constexpr int kMaxRanks = 8;              // one NVLink domain of H200s
inline constexpr std::size_t kFlagsBytes = 4096;
// Flags word of owner d's drain flag (FusedMoe::set_combine_drain): d's side stream writes
// its launch number there once its copies to this rank have landed.
inline constexpr int kDrainFlagsIndex = kMaxLocalExperts + 8;
static_assert((kDrainFlagsIndex + kMaxRanks) * sizeof(unsigned) <= kFlagsBytes, "drain flags");

// The kernel's wait sites (sync::WaitReport::site; the kernel reports into the
// launcher's own host-mapped report) and their names. Budgets (sync/wait.cuh): the
// LSA barrier and the dispatch rows 1 (peers only), the start gate, L1 row blocks and
// combine rows 2 (this rank's CTAs too), the mbarriers 3, the release agent 6.
enum class MoeSite : int {
  start_gate, lsa_barrier, dispatch_rows, l1_row_block, combine_rows,  // counters
  item_full, item_empty, stage_full, stage_empty,                       // mbarriers
  release_full, release_empty,                                          // the release agent's queue
  drained_rows                                                          // the combine drain's flags
};
inline constexpr const char* kMoeSiteNames[] = {
    "start gate (after the LSA barrier)",
    "LSA barrier arrival of a peer (index = peer)",
    "dispatch rows of a local expert (index = expert)",
    "L1 tiles of a row block (index = expert * max_m_blocks + m)",
    "combine rows of this rank's tokens",
    "mbarrier item_full (consumer waits for a work item; index = slot)",
    "mbarrier item_empty (producer waits for a free item slot; index = slot)",
    "mbarrier full (consumer waits for TMA bytes of a stage; index = stage)",
    "mbarrier empty (producer waits for consumers to free a stage; index = stage)",
    "release agent waits for a finished tile (index = bit mask of the consumer warpgroups still running; no tile "
    "for six budgets)",
    "mbarrier release_empty (consumer waits for the release agent; index = warpgroup * slots + slot)",
    "combine rows copied back by an owner's drain stream (index = owner rank)",
};
inline constexpr sync::SiteNames kMoeSites{sync::Kernel::moe, "moe fused", kMoeSiteNames,
                                           static_cast<int>(std::size(kMoeSiteNames))};

// Everything the kernel reads; passed by value as a __grid_constant__ (the TMA
// descriptors must live in parameter space). Field comments give the shapes.
struct FusedArgs {
  CUtensorMap map_recv;            // recv [max_rows, hidden] in the window, box 128 x 64, 128-B swizzle
  CUtensorMap map_h;               // H [max_rows, I]
  CUtensorMap map_w1;              // W1 as [E/P * 2I, hidden]
  CUtensorMap map_w2;              // W2 as [E/P * hidden, I]
  ncclWindow_t window;             // symmetric window (flags, recv, comb)
  // Every rank's window memory as plain pointers, or all null: through the window's LSA
  // pointers. EP = 1: [0] is this rank's own (NCCL gives a one-rank communicator no
  // symmetric memory); a OneGpuGroup: all P, on this GPU (no LSA barrier either).
  char* plain[kMaxRanks];
  // Every rank's combine rows apart from its window, or all null (in the window at
  // comb_off): a OneGpuGroup with WindowMemory::host keeps them in mapped host memory.
  char* plain_comb[kMaxRanks];
  ncclDevComm dev;                 // LSA barrier at the start of each launch (unused with plain pointers)
  std::size_t recv_off, comb_off;  // byte offsets in the window
  int rank, ranks, tokens, topk, hidden, inter, experts_local, l1_n_blocks, l2_n_blocks;
  const std::uint16_t* x;          // [T, hidden] bf16, this rank's tokens
  const std::uint16_t* w1;         // [E/P, 2I, hidden] bf16
  const std::uint16_t* w2;         // [E/P, hidden, I] bf16
  std::uint16_t* h;                // [max_rows, I] bf16 scratch (SwiGLU output)
  std::uint16_t* out;              // [T, hidden] bf16
  const float* weight;             // [T*k] routing weights
  const int* expert;               // [T*k] global expert ids
  const int* send_rank;            // [T*k] destination rank of each (token, slot)
  const int* send_row;             // [T*k] row in the destination's recv
  const int* expert_offset;        // [E/P + 1] recv rows of each local expert
  const int* recv_src_rank;        // [rows] owner of each recv row
  const int* recv_src_slot;        // [rows] token*k + slot on the owner
  const WorkItem* items;           // [*n_items] the schedule's global order
  const int* n_items;              // device: uploaded, or written by the GPU planner
  unsigned* ticket;                // next item (zeroed before each launch)
  unsigned* l1_done;               // [E/P, max_m_blocks] L1 warpgroup halves finished (zeroed per launch)
  int max_m_blocks;
  unsigned* gate;                  // local: block 0 releases the epoch after the LSA barrier
  const unsigned* dispatch_expect; // [E/P] cumulative dispatch count to wait for
  unsigned combine_expect;         // cumulative combine count to wait for
  // The host-link combine drain, or all null: L2 rows go to this rank's drain_stage at
  // their stage rows ((source, local expert) order, HBM) and l2_done[local expert] counts
  // the tiles' warpgroup halves (only grows); the owners' side streams copy them into the
  // sources' return rows (plain_comb) and raise the drain flags; the combine reads a row
  // at return_row, or its own rows at the stage row of their send_row.
  std::uint16_t* drain_stage;      // [max_rows, hidden]
  unsigned* l2_done;               // [E/P]
  const int* return_row;           // [T*k]
  const int* drain_stage_row;      // [rows] stage row of each recv row (drain_stage_rows)
  unsigned epoch;                  // launch number, from 1
  int dispatch_first, dispatch_step;  // dispatch passes over local expert ids (moe::DispatchPlan)
  unsigned long long* profile;     // nullptr: an unprofiled launch; else see kProfileRoles
  sync::WaitContext wait;          // budget, rank, the launcher's host-mapped report
};

// Launches the kernel (grid = blocks, one per SM). Defined in the .cu.
void launch_fused(const FusedArgs& args, int blocks, cudaStream_t stream);

// Byte offsets of the window's parts, and its size (the same on every rank).
struct WindowLayout {
  std::size_t recv_off = 0, comb_off = 0, bytes = 0;
};
WindowLayout window_layout(const Problem& p, int max_rows);

// P ranks on the current GPU, without NCCL (tests of the P > 1 code on one GPU): the
// group holds every rank's window as plain device memory, and each FusedMoe(group, r,
// stream) reaches the others' through plain pointers. Only the transport differs from P
// GPUs (no NVLink, no LSA barrier). The P kernels wait for each other's dispatch rows
// and combine rows, so they must run at once: launch all P (each on its own stream)
// before synchronising any, with blocks() summing to at most the SM count (the default
// is SMs / P each), and synchronise all of them before the next launches (no start
// barrier). Inputs by set_inputs only (route_on_device's all-gather needs NCCL).
//
// WindowMemory::host puts every rank's combine rows (comb(r)) in mapped pinned host
// memory: every combine store, the L2 epilogue's bursts that the schedules order,
// crosses the host link (the emulated ranks' remote traffic over a link with a strong
// X-Stage, docs/xstage-host-link.md). The rest of the window stays in HBM: the dispatch
// rows, as on a receiving GPU (the L1 mainloop reads them once per N block; in host
// memory the forward timed those reads, 25-120 ms against 1-3 ms of compute), and the
// counters, as in the Ulysses host-link bench (no dependence on PCIe atomics and
// polling). Tokens, weights, the SwiGLU scratch and the outputs stay in HBM too.
enum class WindowMemory { device, host };
class OneGpuGroup {
 public:
  OneGpuGroup(const Problem& p, int max_rows, WindowMemory memory = WindowMemory::device);
  const Problem& problem() const { return p_; }
  int max_rows() const { return max_rows_; }
  const WindowLayout& layout() const { return layout_; }
  WindowMemory memory() const { return memory_; }
  char* window(int rank) { return reinterpret_cast<char*>(windows_.at(rank).get()); }
  // Rank `rank`'s combine rows when they are not in its window (WindowMemory::host), else null.
  char* comb(int rank) {
    return memory_ == WindowMemory::host ? reinterpret_cast<char*>(host_comb_.at(rank).device()) : nullptr;
  }

 private:
  Problem p_;
  int max_rows_;
  WindowLayout layout_;
  WindowMemory memory_;
  std::vector<DeviceBuffer<unsigned char>> windows_;
  std::vector<MappedHostBuffer<unsigned char>> host_comb_;  // WindowMemory::host: the combine rows
};

class FusedMoe {
 public:
  // Collective over all ranks. max_rows: the most recv rows any forward will have.
  FusedMoe(comm::Rank& rank, const Problem& p, int max_rows);
  // Rank `rank` of a one-GPU group (above), on `stream`.
  FusedMoe(OneGpuGroup& group, int rank, cudaStream_t stream);
  ~FusedMoe();
  FusedMoe(const FusedMoe&) = delete;
  FusedMoe& operator=(const FusedMoe&) = delete;

  // This rank's expert weights: w1 [E/P, 2I, hidden], w2 [E/P, hidden, I] (device
  // pointers; the caller owns them).
  void set_weights(const std::uint16_t* w1, const std::uint16_t* w2);
  // This rank's tokens (device [T, hidden]), routing, the global layout, and the
  // schedule's order for this rank. Waits for the rank's stream first (the previous
  // launch may still read the buffers it overwrites); the uploads have landed on return.
  void set_inputs(const std::uint16_t* x, const Routing& routing, const Layout& layout,
                  const std::vector<WorkItem>& order);
  // The same from this rank's router logits [T, E] fp32 on the device, with no host
  // round trip: top-k, the gathered experts of all ranks (ncclAllGather), layout and
  // the order of `config` are computed on rank.stream() (moe/device_route.hpp). The
  // config's wave size, lag and split are chosen by the caller before the routing is
  // known (e.g. choose_schedule over expected_tiles). Needs max_rows >=
  // route::max_recv_rows(p). Collective when P > 1. A FusedMoe takes its inputs one
  // way only: set_inputs or route_on_device, whichever comes first.
  void route_on_device(const std::uint16_t* x, const float* logits, const ScheduleConfig& config,
                       int raster_group = kMoeRasterGroup);
  // This rank's routing of the last route_on_device (copied to the host; waits for
  // the stream): for tests and debugging.
  Routing device_routing() const;
  // Planner phases of route_on_device (CUDA events), summed since the last reset:
  // top-k, the experts' all-gather (P > 1), count, scan, order, assign; and calls.
  struct PlannerPhases {
    double topk_us = 0, gather_us = 0, count_us = 0, scan_us = 0, order_us = 0, assign_us = 0;
    int calls = 0;
  };
  void profile_planner(bool on);    // records the events from the next call; off by default
  PlannerPhases planner_phases();   // synchronises; then resets the sums
  // Profiled launches (the kernel's CycleProfile instantiation, which reads the SM clock
  // around its phases; the NoProfile one has none of that code). Off by default.
  // profile() synchronises, returns the phases of the profiled launches since the last
  // call (KernelProfile, moe.hpp), then resets the sums.
  using Profile = KernelProfile;
  void set_profile(bool on);
  Profile profile();
  // Persistent CTAs per launch (next launch): one per SM by default, or n in
  // [1, SM count], e.g. to see whether the SMs contend for L2 bandwidth (xstage bench
  // moe --blocks). profile() reads the sums of the current count's CTAs: change it
  // only between profile() calls.
  void set_blocks(int n);
  // The combine's rows over the host link by copy engine instead of SM stores (a
  // OneGpuGroup with WindowMemory::host, inputs by set_inputs): the L2 epilogue stores
  // into an HBM stage in (source, local expert) order, and a side stream per rank waits
  // for each local expert's L2 tiles (cuStreamWaitValue32 on the GPU's front end: no SM)
  // and, after every `experts_per_copy` experts in the order their last L2 tile comes,
  // copies each source's rows of them to that source's return rows (one copy where they
  // lie together: consecutive local experts); then it raises the drain flags that the
  // combine waits for (with its budget). Fewer, larger copies cost fewer copy-engine
  // operations but start later; the host-link advisor picks the count
  // (predict_host_link_row). No SM store crosses the link, so no SM's reads wait behind
  // the stage. Each launch's stream joins its side stream. Next launch on. Launch the
  // group's forwards with launch_together: a stream wait may hold up work that shares its
  // hardware queue, and a rank's kernel queued behind another rank's wait would never
  // start (at P = 8 the dispatch waits timed out), so every kernel of a forward goes
  // first; and give the process enough queues (common::request_stream_queues).
  void set_combine_drain(bool on, int experts_per_copy = 1);
  void launch();                      // one fused forward on rank.stream()
  // One forward of every rank given: all kernels, then the drains' stream operations.
  static void launch_together(const std::vector<FusedMoe*>& ranks);
  // Waits for the stream; on a device error throws one line that names the
  // timed-out wait when the kernel reported one, and after route_on_device throws if a
  // router logit was not finite (those forwards ran with it ranked as +-FLT_MAX).
  void synchronize();
  std::uint16_t* out() const;         // device [T, hidden]
  int blocks() const { return blocks_; }

 private:
  struct Impl;
  Impl* impl_;
  int sms_ = 0, blocks_ = 0;
  void launch_kernel();
  void enqueue_drain();
};

}  // namespace xstage::moe
