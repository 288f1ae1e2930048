// The Ulysses sequence-parallel attention layer on one rank (CUDA builds).
// One Layer per rank, constructed by every rank of the communicator (collective:
// it registers a symmetric window and a device communicator).
//
//   Layer layer(rank, problem, burstgap_params);
//   layer.set_inputs(q, k, v);            // this rank's [B, S/P, H, D] bf16
//   layer.pre_attention();                // NCCL All-to-All -> [B, S, H/P, D]
//   layer.fused(Completion::receiver_complete);   // attention + fused post-A2A
//   use layer.fused_out()                 // [B, S/P, H, D], this rank's rows, all heads
//
// Baselines on the same buffers: attention_only(), serial() (attention, then
// ncclSend/ncclRecv back and unpack) and coarse() (attention slice by slice,
// each slice's exchange on a second stream). Everything is enqueued on
// stream(); nothing synchronises the host.
//
// Reuse: the fused path writes into the owners' outputs while they may still be
// reading the previous result. The pre-attention All-to-All of the next forward
// orders it (no rank finishes it before every rank has entered it, i.e. has
// finished whatever came before on its stream); a caller that launches fused()
// twice without it must make sure the outputs are no longer read.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "xstage/burstgap/burstgap.hpp"
#include "xstage/comm/comm.hpp"
#include "xstage/ulysses/ulysses.hpp"
#include "xstage/ulysses/qkv.hpp"

namespace xstage::ulysses {

enum class Completion {
  sender_visible,     // returns when this rank's kernel has issued (and retired) its stores
  receiver_complete,  // and every source's slices of this rank's output have arrived
};
const char* to_string(Completion c);

class Layer {
 public:
  // Collective. P >= 2 (P = 1 is refused: it needs no exchange; the attention kernel
  // runs alone). A padded problem (Problem::valid) masks the padded keys on every path.
  Layer(comm::Rank& rank, const Problem& p, const burstgap::ModelParams& params);
  ~Layer();
  const Problem& problem() const;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  void set_inputs(const void* q, const void* k, const void* v);
  void pre_attention();
  // The QKV projection with the pre-attention All-to-All fused into its epilogue
  // (xstage/ulysses/qkv.hpp): one persistent kernel computes this rank's
  // qkv = h·Wᵀ + bias, RMSNorm and RoPE on q and k, and stores each head's rows
  // straight into its owner's attention inputs; then waits until every source's
  // heads have arrived here. Replaces set_inputs + pre_attention. Needs D = 128
  // and (B·S/P) % 128 == 0 (fused_qkv_supported(); otherwise it throws why).
  using QkvInputs = ulysses::QkvInputs;  // xstage/ulysses/qkv.hpp
  bool fused_qkv_supported() const;
  void pre_attention_qkv(const QkvInputs& in);
  // The attention inputs of this rank, [B, S, H/P, D] bf16 (part 0 = q, 1 = k, 2 = v):
  // what pre_attention() or pre_attention_qkv() delivered (diagnostic, tests).
  const std::uint16_t* gathered(int part) const;
  void attention_only();
  // The serial path's post-attention All-to-All (NCCL) of what attention_only() wrote,
  // into serial_out(); serial() is the two in turn.
  void post_attention();
  void serial();
  void coarse();  // B = 1 only
  // signal: per_cta or per_slice completion counting (FusedSignal; automatic:
  // default_signal(problem)); the same stores either way.
  void fused(Completion c, FusedSignal signal = FusedSignal::automatic);
  // Diagnostic (bench): the fused kernel, same order and code, with every owner's
  // pointer and counter replaced by local scratch, so no byte crosses NVLink. Its
  // time minus attention_only() is the kernel's own cost (order, epilogue code);
  // fused() minus it is what the remote stores cost. Output is meaningless.
  void fused_loopback();
  // Diagnostic (bench): attention alone (local stores) in the fused kernel's tile order.
  void attention_fused_order();
  void forward(Completion c) {
    pre_attention();
    fused(c);
  }

  const std::uint16_t* serial_out() const;
  const std::uint16_t* coarse_out() const;
  const std::uint16_t* fused_out() const;  // in the symmetric window
  std::size_t out_elems() const;           // B * S/P * H * D
  const FusedSchedule& schedule() const;
  cudaStream_t stream() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace xstage::ulysses
