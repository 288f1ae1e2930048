// CPU reference of the whole Ulysses layer: the exchange plans run on host
// buffers around the fp64 attention reference of every rank.
#include <cmath>

#include "common/check.hpp"
#include "xstage/ulysses/ulysses.hpp"

namespace xstage::ulysses {

namespace {
constexpr std::size_t kBufs = 5;

// Runs the pre-attention plan of every rank on one tensor (Q, K or V).
std::vector<std::vector<double>> gather_heads(const Problem& p, const std::vector<std::vector<float>>& in) {
  const int P = p.ranks;
  std::vector<ExchangePlan> plans;
  std::vector<std::vector<std::vector<double>>> bufs(P, std::vector<std::vector<double>>(kBufs));
  for (int r = 0; r < P; ++r) {
    plans.push_back(pre_attention_plan(p, r));
    XS_ASSERT(static_cast<int64_t>(in[r].size()) == p.batch * p.rows_per_rank() * p.heads * p.head_dim,
              "ulysses reference: rank {} input has {} elements, expected B*S/P*H*D = {}", r, in[r].size(),
              p.batch * p.rows_per_rank() * p.heads * p.head_dim);
    bufs[r][size_t(Buf::input)].assign(in[r].begin(), in[r].end());
    bufs[r][size_t(Buf::send)].assign(plans[r].send_elems, NAN);
    bufs[r][size_t(Buf::recv)].assign(plans[r].recv_elems, NAN);
    bufs[r][size_t(Buf::attn)].assign(p.batch * p.seq * p.heads_per_rank() * p.head_dim, NAN);
  }
  run_plans_on_host(plans, bufs);
  std::vector<std::vector<double>> out(P);
  for (int r = 0; r < P; ++r) out[r] = std::move(bufs[r][size_t(Buf::attn)]);
  return out;
}

std::vector<float> to_float(const std::vector<double>& v) { return {v.begin(), v.end()}; }

// The rows [0, keys()) of each batch of a gathered [B, S, H/P, D] tensor: what attention reads as keys.
std::vector<float> keys_of(const Problem& p, const std::vector<double>& v) {
  const int64_t row = p.heads_per_rank() * p.head_dim;
  std::vector<float> out;
  out.reserve(size_t(p.batch * p.keys() * row));
  for (int64_t b = 0; b < p.batch; ++b) {
    const auto first = v.begin() + b * p.seq * row;
    out.insert(out.end(), first, first + p.keys() * row);
  }
  return out;
}
}  // namespace

std::vector<std::vector<double>> reference_layer(const Problem& p, const std::vector<std::vector<float>>& q,
                                                 const std::vector<std::vector<float>>& k,
                                                 const std::vector<std::vector<float>>& v) {
  validate(p);
  const int P = p.ranks;
  XS_ASSERT(int(q.size()) == P && int(k.size()) == P && int(v.size()) == P,
            "ulysses reference: need Q, K, V of each of the {} ranks", P);
  const auto qa = gather_heads(p, q), ka = gather_heads(p, k), va = gather_heads(p, v);
  std::vector<ExchangePlan> plans;
  std::vector<std::vector<std::vector<double>>> bufs(P, std::vector<std::vector<double>>(kBufs));
  const double scale = 1.0 / std::sqrt(double(p.head_dim));
  for (int r = 0; r < P; ++r) {
    plans.push_back(post_attention_plan(p, r));
    auto ref = attention::reference_fwd(to_float(qa[r]), keys_of(p, ka[r]), keys_of(p, va[r]), p.batch, p.seq,
                                        p.keys(), p.heads_per_rank(), p.head_dim, p.causal, scale);
    bufs[r][size_t(Buf::attn)] = std::move(ref.o);
    bufs[r][size_t(Buf::send)].assign(plans[r].send_elems, NAN);
    bufs[r][size_t(Buf::recv)].assign(plans[r].recv_elems, NAN);
    bufs[r][size_t(Buf::output)].assign(p.batch * p.rows_per_rank() * p.heads * p.head_dim, NAN);
  }
  run_plans_on_host(plans, bufs);
  std::vector<std::vector<double>> out(P);
  for (int r = 0; r < P; ++r) out[r] = std::move(bufs[r][size_t(Buf::output)]);
  return out;
}

}  // namespace xstage::ulysses
