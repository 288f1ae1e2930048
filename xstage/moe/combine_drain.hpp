// The host-link combine drain of one rank of a OneGpuGroup (FusedMoe::set_combine_drain):
// the L2 epilogue keeps its rows in HBM in (source, local expert) order (stage,
// drain_stage_rows), the release agent counts each local expert's tiles (l2_done, only
// grows), and a side stream waits for a group of experts' counts and copies each
// source's rows of them to that source's return rows over the host link, then raises
// this owner's flag on every rank (the combine's wait). The copy engine moves the bytes,
// so the SMs' reads do not wait behind the post-issue stage as they do for SM stores
// (docs/xstage-host-link.md).
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <vector>

#include "common/device_buffer.hpp"
#include "xstage/moe/layout.hpp"
#include "xstage/moe/sm90_moe_fused.hpp"

namespace xstage::moe {

// One forward's plan of a rank's drain: its local experts in the order their last L2 tile
// comes, each with its tile halves (two per tile) and its copies.
struct DrainExpert {
  int local = 0;
  unsigned halves = 0;
  std::vector<DrainCopy> copies;
};
std::vector<DrainExpert> drain_plan(const RankLayout& R, const std::vector<WorkItem>& order, int ranks);
// The plan's groups of `experts_per_copy` experts with their merged copies (group_drain).
std::vector<DrainGroup> drain_groups(const std::vector<DrainExpert>& plan, int experts_per_copy);

class CombineDrain {
 public:
  CombineDrain(const Problem& p, int rank, int max_rows);
  ~CombineDrain();
  CombineDrain(const CombineDrain&) = delete;
  CombineDrain& operator=(const CombineDrain&) = delete;

  // Enqueues launch `epoch`'s waits (`plan`), copies (its `groups`: drain_groups) and
  // flags on the side stream (after the kernel's launch on `main`) and makes `main` wait
  // for them at its end. windows[r]: rank r's window (flags at word kDrainFlagsIndex);
  // returns[r]: rank r's return rows (mapped host memory).
  void enqueue(cudaStream_t main, unsigned epoch, const std::vector<DrainExpert>& plan,
               const std::vector<DrainGroup>& groups, const std::array<char*, kMaxRanks>& windows,
               const std::array<char*, kMaxRanks>& returns);
  std::uint16_t* stage() { return stage_.get(); }
  unsigned* l2_done() { return l2_done_.get(); }

 private:
  Problem p_;
  int rank_;
  cudaStream_t side_ = nullptr;
  cudaEvent_t done_ = nullptr;
  DeviceBuffer<std::uint16_t> stage_;
  DeviceBuffer<unsigned> l2_done_;
  std::vector<unsigned> total_;  // cumulative halves per local expert, as l2_done must reach
};

}  // namespace xstage::moe
