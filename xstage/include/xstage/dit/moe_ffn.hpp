// The DiT block's MoE FFN on one rank, through the fused expert-parallel MoE
// kernel (xstage/moe/sm90_moe_fused.hpp). Private to xstage/dit.
//
// Per block, on the rank's stream (rank r of P, L = N/P tokens, E experts), with
// routing on the GPU (Config::moe_device_routing, the default):
//   1. the caller's router GEMM writes logits() [L, E] fp32 (= h · W_routerᵀ);
//   2. FusedMoe::route_on_device: top-k on the GPU, P > 1: ncclAllGather of the
//      chosen experts [L·k] int32, then layout and this rank's Interleaved order on
//      the GPU (moe/device_route.hpp); the order's wave size, lag and split were
//      chosen once, at construction, for the expected per-expert counts
//      (moe::expected_tiles), since the real counts are only known on the GPU;
//   3. launch: dispatch, L1 + SwiGLU, L2 with remote stores to the tokens'
//      owners, weighted top-k combine.
// Nothing waits for the host. Errors of the kernel (a timed-out wait, non-finite
// logits) surface at synchronize(), which RankModel calls where it synchronises.
//
// With host routing (moe_device_routing = false, `xstage dit --moe-routing host`):
//   2'. P > 1: ncclAllGather of the logits -> [N, E], rank-major; a copy to pinned
//      host memory and a stream synchronisation (FusedMoe::synchronize);
//   3'. on the host, every rank computes every rank's routing (route_from_logits)
//      and the same global layout (moe_route), then its own Interleaved tile order
//      for the real counts (moe_order); set_inputs uploads them; then launch.
//   The stream idles from the synchronisation to the launch once per block; the
//   per-step timing includes it, and host_times() reports its parts.
// Returns FusedMoe::out(): [L, C] bf16, the FFN output of this rank's tokens.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "xstage/burstgap/burstgap.hpp"
#include "common/device_buffer.hpp"
#include "xstage/dit/dit.hpp"
#include "xstage/dit/dit_cuda.hpp"  // MoeTimes
#include "xstage/moe/moe.hpp"       // ScheduleConfig

namespace xstage::comm {
class Rank;
}
namespace xstage::moe {
class FusedMoe;
}

namespace xstage::dit {

class MoeFfn {
 public:
  // Collective (the kernel's symmetric window and device communicator): every
  // rank constructs its MoeFfn at the same point. tokens: N of the run.
  MoeFfn(comm::Rank& rank, const Config& c, int64_t tokens, const burstgap::ModelParams& params);
  ~MoeFfn();
  MoeFfn(const MoeFfn&) = delete;
  MoeFfn& operator=(const MoeFfn&) = delete;

  float* logits() const { return logits_.get(); }  // device [L, E] fp32: the router GEMM's output
  // h: [L, C] bf16 (read by the kernel; keep it until the next forward);
  // w1 [E/P, 2I, C], w2 [E/P, C, I]: this rank's experts of the block, bf16.
  const std::uint16_t* forward(const std::uint16_t* h, const std::uint16_t* w1, const std::uint16_t* w2);
  // Sums since the last reset, up to the last synchronize() (GPU times are read from
  // events then).
  const MoeTimes& host_times() const { return times_; }
  void reset_host_times();  // synchronises first
  // Waits for the rank's stream; throws one line naming a timed-out wait of the
  // kernel or non-finite router logits.
  void synchronize();

 private:
  comm::Rank& rank_;
  moe::Problem p_;
  burstgap::ModelParams params_;
  int raster_group_;
  bool device_routing_;
  moe::ScheduleConfig device_schedule_;  // device routing: chosen for the expected counts
  MoeTimes times_;
  // Per forward since the last synchronisation: events before the planner, before
  // the kernel, after it (reused; `pending_` of them recorded).
  std::vector<std::array<cudaEvent_t, 3>> events_;
  std::size_t pending_ = 0;
  void record(int which);
  void collect();  // after a synchronisation: add the pending forwards' GPU times
  std::unique_ptr<moe::FusedMoe> fused_;
  DeviceBuffer<float> logits_, gathered_;
  float* host_ = nullptr;  // pinned [N, E]
};

}  // namespace xstage::dit
