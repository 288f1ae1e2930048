// Shared-memory types of the fused MoE kernel (sm90_moe_fused.cuh): the barriers and
// queues of one CTA, the named barriers, and the window pointers of a rank.
#pragma once

#include <nccl_device.h>

#include <cstddef>
#include <cstdint>

#include "xstage/moe/sm90_moe_fused.hpp"

namespace xstage::moe::device {

using Shape = FusedKernelShape;

// A finished tile's release, from a consumer warpgroup's thread 0 to the agent.
enum ReleaseKind : int { kReleaseStop = -1, kReleaseL1 = 0, kReleaseL2 = 1 };
struct ReleaseReq {
  int kind;                                  // ReleaseKind
  int index;                                 // L1: l1_done index (expert * max_m_blocks + m); L2: expert
  unsigned long long counts;                 // L2: byte o = rows stored to owner o (<= 64)
};

// A work item as the producer warp hands it over, with what its epilogue needs looked
// up already (the consumers then load nothing from global memory after their mainloop).
struct ItemSlot {
  WorkItem it;                                 // expert < 0: no more items
  TileLoads ld;                                // tile_loads(it, ...): ld.a_row is the first recv row
  int rows_end;                                // expert_offset[e + 1]: the next expert's rows start there
  unsigned long long counts[Shape::kConsumerWGs];  // L2: byte o = the warpgroup's rows for owner o
};
// An L2 tile row's destination, Barriers::dest: slot * kMaxRanks + owner rank, or -1
// past the expert's rows.
constexpr int kNoDest = -1;

// item_full[slot] (the producer warp's 32 lanes) / item_empty[slot] (all 256 consumer
// threads, after the item's epilogue: it reads the slot's dest; one arrival per thread
// that wrote or read the slot, so each access is ordered by its own arrive), full[stage]
// (expect_tx + TMA bytes) / empty[stage] (8 consumer warps), rel_full[wg][slot] (the
// warpgroup's thread 0) / rel_empty[wg][slot] (the agent).
struct Barriers {
  uint64_t full[Shape::kStages], empty[Shape::kStages];
  uint64_t item_full[Shape::kItemSlots], item_empty[Shape::kItemSlots];
  uint64_t rel_full[Shape::kConsumerWGs][Shape::kReleaseSlots], rel_empty[Shape::kConsumerWGs][Shape::kReleaseSlots];
  ItemSlot item[Shape::kItemSlots];
  int dest[Shape::kItemSlots][kTileM];  // the item's L2 row destinations (kNoDest: none)
  std::uint16_t* comb_base[kMaxRanks];  // comb_rows(a, r), looked up once per launch
  ReleaseReq rel[Shape::kConsumerWGs][Shape::kReleaseSlots];
  unsigned long long prof[kProfileRoles][kProfileFields];  // CycleProfile: this CTA's sums
};
static_assert(sizeof(Barriers) <= Shape::kBarBytes, "barrier area");

// Named CTA barriers (0 is __syncthreads).
constexpr int kEpilogueBar0 = 1;  // + consumer warpgroup
constexpr int kConsumersBar = 1 + Shape::kConsumerWGs;

// Byte `off` of rank `rank`'s window (local_window_at: this rank's): a plain pointer
// when the host gave them (EP = 1, where NCCL gives a one-rank communicator no
// symmetric memory; a OneGpuGroup), else the window's LSA pointer.
__device__ __forceinline__ void* window_at(const FusedArgs& a, std::size_t off, int rank) {
  return a.plain[0] != nullptr ? a.plain[rank] + off : ncclGetLsaPointer(a.window, off, rank);
}
// Rank `rank`'s combine rows: apart from the window where the host gave them
// (FusedArgs::plain_comb), else in it.
__device__ __forceinline__ std::uint16_t* comb_rows(const FusedArgs& a, int rank) {
  return static_cast<std::uint16_t*>(a.plain_comb[0] != nullptr ? static_cast<void*>(a.plain_comb[rank])
                                                                 : window_at(a, a.comb_off, rank));
}
__device__ __forceinline__ void* local_window_at(const FusedArgs& a, std::size_t off) {
  return a.plain[0] != nullptr ? a.plain[a.rank] + off : ncclGetLocalPointer(a.window, off);
}
__device__ __forceinline__ const std::uint16_t* local_comb_rows(const FusedArgs& a) {
  return static_cast<const std::uint16_t*>(a.plain_comb[0] != nullptr ? static_cast<void*>(a.plain_comb[a.rank])
                                                                       : local_window_at(a, a.comb_off));
}

}  // namespace xstage::moe::device
