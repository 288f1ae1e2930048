// The DiT block's MoE FFN on one rank, through the fused expert-parallel MoE
// kernel (xstage/moe/sm90_moe_fused.hpp). Private to xstage/dit.
//
// Per block, on the rank's stream (rank r of P, L = N/P tokens, E experts):
//   1. the caller's router GEMM writes logits() [L, E] fp32 (= h · W_routerᵀ);
//   2. P > 1: ncclAllGather -> [N, E], rank-major; then a copy to pinned host
//      memory and a stream synchronisation (FusedMoe::synchronize, which names a
//      timed-out device wait of the previous block's launch);
//   3. on the host, every rank computes every rank's routing (route_from_logits)
//      and the same global layout (moe_route), then its own Interleaved tile
//      order (moe_order: choose_schedule with the Burst-Gap parameters);
//   4. set_weights (this block's E/P experts), set_inputs (h, routing, layout,
//      order), launch: dispatch, L1 + SwiGLU, L2 with remote stores to the
//      tokens' owners, weighted top-k combine.
// Returns FusedMoe::out(): [L, C] bf16, the FFN output of this rank's tokens.
//
// The host round trip (step 2) is a known cost: the kernel indexes by a layout
// built on the host from every rank's routing (send rows, per-expert receive
// offsets, a tile list whose length depends on the counts), so data-dependent
// routing stalls the stream once per block. The logits travel through NCCL
// (not a host structure shared by rank threads), so the same code serves one
// process per GPU. The stream being idle during step 3 is inside the per-step
// timing.
#pragma once

#include <cstdint>
#include <memory>

#include "xstage/burstgap.hpp"
#include "xstage/device_buffer.hpp"
#include "xstage/dit.hpp"
#include "xstage/dit_cuda.hpp"  // MoeHostTimes

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
  const MoeHostTimes& host_times() const { return times_; }
  void reset_host_times() { times_ = {}; }

 private:
  comm::Rank& rank_;
  moe::Problem p_;
  burstgap::ModelParams params_;
  int raster_group_;
  MoeHostTimes times_;
  std::unique_ptr<moe::FusedMoe> fused_;
  DeviceBuffer<float> logits_, gathered_;
  float* host_ = nullptr;  // pinned [N, E]
};

}  // namespace xstage::dit
