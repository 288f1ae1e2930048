// Launchers of the fused Ulysses path (ulysses_fused.cu): plain types only, so
// the host layer (ulysses_layer.cpp) needs no device code.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>

#include "xstage/attention/attention.hpp"
#include "xstage/sync/report.hpp"
#include "xstage/ulysses/geometry.hpp"

namespace xstage::ulysses {

struct FusedTargets {
  void* out[kMaxRanks] = {};           // each owner's output (LSA pointers into the window)
  uint32_t* counter[kMaxRanks] = {};   // each owner's counter for this rank (LSA pointers)
  FusedGeometry geo;
  FusedSignal signal = FusedSignal::per_cta;
};

// The attention kernel with the remote-store epilogue; args.o is unused (the
// epilogue decides where rows go); cfg.tiles carries the chosen order.
void launch_fused_attention(const attention::FwdArgs& args, const attention::FwdConfig& cfg, const FusedTargets& t,
                            cudaStream_t stream);

// Per source rank: a cumulative count (what each source has signalled so far).
struct SourceCounts {
  uint32_t v[kMaxRanks] = {};
};

// Receiver-complete: one thread per source rank acquires counters[src] >=
// expected.v[src]. `wait` gives the budget and this rank ({budget_ns, rank}); on
// timeout the wait fills the process-wide report (rank, source rank = its counter,
// expected, seen; sync::take_report() names it) and traps.
void launch_wait_sources(const uint32_t* counters, int ranks, const SourceCounts& expected, sync::WaitContext wait,
                         cudaStream_t stream);

// LSA pointers of window offset `offset` on ranks 0 .. ranks-1 (a one-thread kernel; blocking).
void lsa_pointers(ncclWindow_t window, std::size_t offset, int ranks, void** out);

}  // namespace xstage::ulysses
