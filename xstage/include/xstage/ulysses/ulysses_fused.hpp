// Launchers of the fused Ulysses path (ulysses_fused.cu): plain types only, so
// the host layer (ulysses_layer.cpp) needs no device code.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>

#include "xstage/attention.hpp"
#include "xstage/comm_device_types.hpp"
#include "xstage/ulysses_geometry.hpp"

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
// expected.v[src]; on timeout prints rank, source rank, counter address, expected
// and seen, then traps.
void launch_wait_sources(const uint32_t* counters, int ranks, const SourceCounts& expected, comm::WaitBudget budget,
                         cudaStream_t stream);

// LSA pointers of window offset `offset` on ranks 0 .. ranks-1 (a one-thread kernel; blocking).
void lsa_pointers(ncclWindow_t window, std::size_t offset, int ranks, void** out);

}  // namespace xstage::ulysses
