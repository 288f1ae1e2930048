// One rank's share of a Ulysses layer on one GPU, as the one-GPU benches time it
// (--kernel-only in ulysses_bench.cpp, --link host in ulysses_host_link.cpp): q, k, v of
// [B, S, H/P, D], random and seeded, its attention output, and the attention arguments.
// Private to xstage/ulysses.
#pragma once

#include <cstdint>

#include "common/device_buffer.hpp"
#include "xstage/attention/attention_cuda.hpp"
#include "xstage/ulysses/ulysses.hpp"

namespace xstage::ulysses {

struct ShareInputs {
  Problem p;
  std::size_t n_attn;   // elements of q, k, v and the output
  std::size_t n_owner;  // elements of one owner's layer output [B, S/P, H, D]
  DeviceBuffer<std::uint16_t> q, k, v, o;
  attention::FwdArgs a;  // output in o
  explicit ShareInputs(const Problem& prob)
      : p(prob), n_attn(p.batch * p.seq * p.heads_per_rank() * p.head_dim),
        n_owner(p.batch * p.rows_per_rank() * p.heads * p.head_dim), q(n_attn), k(n_attn), v(n_attn), o(n_attn) {
    attention::fill_random_bf16(q.get(), n_attn, 41, 1.0f);
    attention::fill_random_bf16(k.get(), n_attn, 42, 1.0f);
    attention::fill_random_bf16(v.get(), n_attn, 43, 1.0f);
    const int64_t S = p.seq, Hp = p.heads_per_rank(), D = p.head_dim;
    a.q = attention::Tensor4::bshd(q.get(), p.batch, S, Hp, D);
    a.k = attention::Tensor4::bshd(k.get(), p.batch, S, Hp, D);
    a.v = attention::Tensor4::bshd(v.get(), p.batch, S, Hp, D);
    a.o = attention::Tensor4::bshd(o.get(), p.batch, S, Hp, D);
  }
};

}  // namespace xstage::ulysses
