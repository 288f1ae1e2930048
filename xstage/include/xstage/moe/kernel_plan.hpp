// Expert-parallel MoE, the fused kernel's plan: shared memory, threads, TMA views and
// each work item's loads. Host-visible so that it is CPU-tested; the kernel uses the same
// constants and the same tile_loads().
#pragma once

#include <string>
#include <vector>

#include "common/host_device.hpp"
#include "xstage/moe/schedule.hpp"

namespace xstage::moe {


// Shared memory, threads and registers of one CTA (one per SM, persistent).
struct FusedKernelShape {
  static constexpr int kConsumerWGs = 2;                    // 64 rows each
  static constexpr int kThreads = 128 * (1 + kConsumerWGs); // warpgroup 0 produces
  static constexpr int kConsumerWarps = 4 * kConsumerWGs;
  static constexpr int kProducerRegs = 56;                  // setmaxnreg.dec
  static constexpr int kConsumerRegs = 224;                 // setmaxnreg.inc: 2 x 128 fp32 accumulators
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
  static constexpr int kBarBytes = 2048;  // barriers, item slots and their row destinations, release queues, profile sums
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
XS_HD TileLoads tile_loads(const WorkItem& it, int expert_first_row, int hidden, int inter) {
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


}  // namespace xstage::moe
