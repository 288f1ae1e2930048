// GPU tests of the Ulysses layer (label gpu): on 2 ranks (4 when visible) the
// fused output equals the serial one bitwise on every rank, for both
// completion modes, and so does the coarse-overlap baseline; all three are
// close to the fp64 CPU attention on the gathered sequence; a slow peer only
// delays the receiver, an absent one makes it time out with a message naming
// the rank and the flag (in a child process: the fault ends its CUDA context).
// The fused QKV projection: one rank's kernel (every owner itself) against the
// fp64 reference, twice, with poisoned outputs; on 2+ ranks through the layer,
// every owner's gathered q, k, v; an owner that never starts makes the kernel
// time out naming it (one GPU suffices: its ready flag is never raised).
// On one GPU standing in for P = 2, 4, 8 ranks (every owner's buffers local, the
// sources' kernels one after the other): both fused kernels deliver every owner's
// rows (attention: bitwise the plain kernel's; QKV: within one bf16 step of fp64)
// and count each (owner, source) pair's signals as the receivers expect.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "common/test_child.hpp"
#include "xstage/attention/attention.hpp"
#include "xstage/attention/attention_cuda.hpp"
#include "xstage/bench/copy_costs.hpp"
#include "xstage/bench/qkv_bench.hpp"
#include "xstage/bench/ulysses_bench.hpp"
#include "common/cuda_check.hpp"
#include "xstage/comm/comm.hpp"
#include "common/device_buffer.hpp"
#include "xstage/ulysses/qkv_fused.hpp"
#include "xstage/ulysses/ulysses_fused.hpp"
#include "xstage/ulysses/ulysses_cuda.hpp"
#include "xstage/ulysses/qkv.hpp"
#include "xstage/sync/report.hpp"

namespace {

using namespace xstage;
using namespace xstage::ulysses;

burstgap::ModelParams params() {
  burstgap::ModelParams m;
  m.t0_ns_per_byte = 0.0198;
  m.issue_latency_ns = 176;
  m.drain_GBps = 419;
  m.capacity_bytes_gpu = 11.2e6;
  return m;
}

struct Inputs {  // every rank's Q, K, V as bf16 bits, and the full tensors as floats
  std::vector<std::vector<uint16_t>> q, k, v;
  std::vector<float> fq, fk, fv;
};

Inputs make_inputs(const Problem& p, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int64_t S = p.seq, R = p.rows_per_rank(), HD = p.heads * p.head_dim, B = p.batch;
  Inputs in;
  for (auto* f : {&in.fq, &in.fk, &in.fv}) {
    f->resize(B * S * HD);
    for (auto& x : *f) x = attention::bf16_bits_to_float(attention::float_to_bf16_bits(nd(rng)));
  }
  // Padded rows (Problem::valid) as keys are poison: NaN would reach every output that read one.
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = p.keys(); s < S; ++s)
      for (int64_t e = 0; e < HD; ++e) in.fk[(b * S + s) * HD + e] = in.fv[(b * S + s) * HD + e] = NAN;
  auto split = [&](const std::vector<float>& f, std::vector<std::vector<uint16_t>>& out) {
    out.assign(p.ranks, {});
    for (int r = 0; r < p.ranks; ++r)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < R * HD; ++i) out[r].push_back(attention::float_to_bf16_bits(f[(b * S + r * R) * HD + i]));
  };
  split(in.fq, in.q);
  split(in.fk, in.k);
  split(in.fv, in.v);
  return in;
}


std::vector<uint16_t> download(const uint16_t* d, std::size_t n) {
  std::vector<uint16_t> h(n);
  XS_CHECK_CUDA(cudaMemcpy(h.data(), d, n * 2, cudaMemcpyDeviceToHost));
  return h;
}

void sync_or_throw(cudaStream_t st, int rank) {
  const cudaError_t e = cudaStreamSynchronize(st);
  if (e != cudaSuccess)
    throw std::runtime_error("rank " + std::to_string(rank) + ": " + cudaGetErrorString(e) + " " +
                             xstage::sync::take_report());
}

// Runs every path on P ranks and checks them; `slow_rank` delays its fused launch.
void run_case(const Problem& p, int slow_rank = -1) {
  SCOPED_TRACE(describe(p));
  const Inputs in = make_inputs(p, 1234 + p.seq + p.ranks);
  std::mutex mu;
  std::vector<std::vector<uint16_t>> fused(p.ranks);
  std::vector<std::string> failures;
  comm::run_ranks(p.ranks, comm::Launch::threads, [&](comm::Rank& rank) {
    const int r = rank.rank();
    cudaStream_t st = rank.stream();
    auto q = upload(in.q[r]), k = upload(in.k[r]), v = upload(in.v[r]);
    Layer layer(rank, p, params());
    layer.set_inputs(q.get(), k.get(), v.get());
    const std::size_t n = layer.out_elems();
    layer.pre_attention();
    layer.serial();
    sync_or_throw(st, r);
    const auto want = download(layer.serial_out(), n);
    std::vector<std::string> bad;
    // Every signal mode, each twice receiver-complete: a miscount in one forward would
    // let the next one's wait pass before its slices are in (caught by the poison).
    const std::pair<Completion, FusedSignal> runs[] = {
        {Completion::receiver_complete, FusedSignal::per_cta},   {Completion::receiver_complete, FusedSignal::per_slice},
        {Completion::receiver_complete, FusedSignal::by_agent},  {Completion::receiver_complete, FusedSignal::per_cta},
        {Completion::sender_visible, FusedSignal::per_cta},      {Completion::receiver_complete, FusedSignal::per_slice},
        {Completion::sender_visible, FusedSignal::per_slice},    {Completion::receiver_complete, FusedSignal::by_agent},
        {Completion::sender_visible, FusedSignal::by_agent},     {Completion::receiver_complete, FusedSignal::automatic}};
    for (const auto& [c, sig] : runs) {
      const std::string what = std::string(to_string(c)) + ", " + to_string(sig);
      fill_device(const_cast<uint16_t*>(layer.fused_out()), 0xFF, n * 2);
      XS_CHECK_CUDA(cudaDeviceSynchronize());
      rank.host_barrier();
      if (r == slow_rank) std::this_thread::sleep_for(std::chrono::milliseconds(300));
      layer.fused(c, sig);
      sync_or_throw(st, r);
      if (c == Completion::receiver_complete) {
        // Complete before any peer-side synchronisation: the wait is what guarantees it.
        const auto got = download(layer.fused_out(), n);
        if (std::memcmp(got.data(), want.data(), n * 2) != 0)
          bad.push_back("rank " + std::to_string(r) + ": fused (" + what + ", before the barrier) != serial");
      }
      rank.host_barrier();
      const auto got = download(layer.fused_out(), n);
      if (std::memcmp(got.data(), want.data(), n * 2) != 0)
        bad.push_back("rank " + std::to_string(r) + ": fused (" + what + ") != serial");
      if (c == Completion::receiver_complete) {
        std::lock_guard lock(mu);
        fused[r] = got;
      }
    }
    if (p.batch == 1) {
      layer.coarse();
      sync_or_throw(st, r);
      if (std::memcmp(download(layer.coarse_out(), n).data(), want.data(), n * 2) != 0)
        bad.push_back("rank " + std::to_string(r) + ": coarse != serial");
    }
    rank.host_barrier();
    std::lock_guard lock(mu);
    failures.insert(failures.end(), bad.begin(), bad.end());
  });
  for (const auto& f : failures) ADD_FAILURE() << f;

  // Against the fp64 attention of the gathered sequence: every query row, padded ones
  // included, against the valid keys.
  const int64_t S = p.seq, R = p.rows_per_rank(), HD = p.heads * p.head_dim, N = p.keys();
  std::vector<float> keys_k, keys_v;
  for (int64_t b = 0; b < p.batch; ++b) {
    keys_k.insert(keys_k.end(), in.fk.begin() + b * S * HD, in.fk.begin() + (b * S + N) * HD);
    keys_v.insert(keys_v.end(), in.fv.begin() + b * S * HD, in.fv.begin() + (b * S + N) * HD);
  }
  const auto ref = attention::reference_fwd(in.fq, keys_k, keys_v, p.batch, S, N, p.heads, p.head_dim, p.causal,
                                            1.0 / std::sqrt(double(p.head_dim)));
  double num = 0, den = 0, mx = 0;
  for (int r = 0; r < p.ranks; ++r)
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t i = 0; i < R * HD; ++i) {
        const double x = attention::bf16_bits_to_float(fused[r][b * R * HD + i]);
        const double y = ref.o[(b * S + r * R) * HD + i];
        num += (x - y) * (x - y);
        den += y * y;
        mx = std::max(mx, std::isfinite(x) ? std::abs(x - y) : INFINITY);
      }
  // bf16 output and P: about 2^-8 relative per element (the attention tests pin it down more tightly).
  EXPECT_LT(std::sqrt(num / den), 1e-2);
  EXPECT_LT(mx, 3e-2);
}

int gpus() { return comm::visible_gpus(); }

std::vector<uint16_t> bits_of(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = attention::float_to_bf16_bits(v[i]);
  return b;
}

// Elements further than one bf16 step (plus a little) from the reference; NaN (the poison) counts.
std::string compare_qkv(const std::vector<uint16_t>& got, const std::vector<float>& want, const char* what) {
  size_t bad = 0, first = 0;
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double x = attention::bf16_bits_to_float(got[i]), y = want[i];
    const double err = std::abs(x - y);
    if (!within_one_bf16_step(x, y)) {
      if (bad++ == 0) first = i;
    }
    if (std::isfinite(err)) worst = std::max(worst, err);
    else worst = INFINITY;
  }
  if (bad == 0) return "";
  return fmt::format("{}: {} of {} elements off (first at {}: got {}, want {}); max |diff| {}", what, bad,
                     want.size(), first, attention::bf16_bits_to_float(got[first]), want[first], worst);
}

// Everything device-side for one rank's fused QKV inputs.
struct QkvDevice {
  DeviceBuffer<uint16_t> h, w;
  DeviceBuffer<float> bias, qn, kn, cs, sn;
  QkvDevice(const QkvHost& in, int r)
      : h(upload(bits_of(in.h[r]))),
        w(upload(bits_of(in.w))),
        bias(upload(in.bias)),
        qn(upload(in.q_norm)),
        kn(upload(in.k_norm)),
        cs(upload(in.cos[r])),
        sn(upload(in.sin[r])) {}
  QkvInputs inputs() const {
    QkvInputs i;
    i.h = h.get();
    i.w = w.get();
    i.bias = bias.get();
    i.q_norm = qn.get();
    i.k_norm = kn.get();
    i.cos = cs.get();
    i.sin = sn.get();
    return i;
  }
};

// One rank, owner of every head: the kernel with local pointers.
struct OneRankQkv {
  Problem p;
  QkvDevice dev;
  DeviceBuffer<uint16_t> out[3];
  DeviceBuffer<uint32_t> flags;  // [0] done, [1] ready, [2] a ready slot nobody raises
  DeviceBuffer<int> order;
  QkvArgs a;
  OneRankQkv(const Problem& prob, const QkvHost& in, const std::vector<int>& entries = {})
      : p(prob),
        dev(in, 0),
        out{DeviceBuffer<uint16_t>(size_t(p.batch * p.seq * p.heads * 128)),
            DeviceBuffer<uint16_t>(size_t(p.batch * p.seq * p.heads * 128)),
            DeviceBuffer<uint16_t>(size_t(p.batch * p.seq * p.heads * 128))},
        flags(3),
        order(upload(entries.empty() ? qkv_tile_order(prob, 0, QkvOrder::natural) : entries)),
        a(qkv_shape_args(prob, 0)) {
    fill_device(flags.get(), 0, 3 * 4);
    qkv_bind_inputs(a, dev.inputs());
    a.order = order.get();
    a.n_entries = entries.empty() ? qkv_tiles(prob) : static_cast<int>(entries.size());
    for (int part = 0; part < 3; ++part) a.dst[part][0] = out[part].get();
    a.done[0] = flags.get();
    a.ready_out[0] = flags.get() + 1;
    a.ready_in = flags.get() + 1;
  }
};

}  // namespace

TEST(UlyssesQkvGpu, OneRankKernelMatchesTheReference) {
  // H = 5: 15 heads, so the last tile's second half is empty; B = 2; K = 640 (10 stages);
  // grids below and at the tile count (several tiles per CTA, and one each); then the
  // first shape on 26 CTAs with its last round split into one-head entries (32 tiles:
  // 26 whole, 6 split, among them the one-head last tile and second-head entries).
  struct Case {
    Problem p;
    int grid;
    bool split;
  };
  for (const auto& [p, grid, split] : {Case{Problem{1, 2, 256, 5, 128}, 3, false},
                                       Case{Problem{1, 1, 512, 8, 128}, 48, false},
                                       Case{Problem{1, 2, 256, 5, 128}, 26, true}}) {
    SCOPED_TRACE(describe(p) + (split ? ", split tail" : ""));
    const QkvHost in = qkv_random_inputs(p, 99 + uint32_t(p.heads));
    const QkvOwnerOut want = qkv_reference(p, in, 0);
    std::vector<int> entries;
    if (split) {
      entries = qkv_split_tail(p, qkv_tile_order(p, 0, QkvOrder::natural), grid);
      ASSERT_EQ(int(entries.size()), qkv_tiles(p) + 5) << "6 tail tiles -> 11 one-head entries";
    }
    OneRankQkv k(p, in, entries);
    // Launches 1-2 release by the agent lane, 3-4 by the consumers: the same outputs and counts.
    for (uint32_t launch = 1; launch <= 4; ++launch) {
      for (auto& o : k.out) fill_device(o.get(), 0xFF, o.size() * 2);  // NaN poison
      k.a.epoch = launch;
      k.a.release_by_agent = launch <= 2 ? 1 : 0;
      launch_qkv_fused(k.a, std::min(grid, k.a.n_entries), nullptr);
      const cudaError_t e = cudaDeviceSynchronize();
      ASSERT_EQ(e, cudaSuccess) << cudaGetErrorString(e) << " " << qkv_explain_failure();
      const char* names[3] = {"q", "k", "v"};
      const std::vector<float>* refs[3] = {&want.q, &want.k, &want.v};
      for (int part = 0; part < 3; ++part) {
        const std::string bad = compare_qkv(download(k.out[part].get(), k.out[part].size()), *refs[part], names[part]);
        EXPECT_EQ(bad, "") << "launch " << launch;
      }
      const auto flags = k.flags.to_host(3);
      EXPECT_EQ(flags[0], launch * qkv_signals_per_source(p));  // what a receiver would wait for
      EXPECT_EQ(flags[1], launch);
    }
  }
}

TEST(UlyssesQkvGpu, LayerDeliversEveryHeadToItsOwner) {
  if (gpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
  for (const Problem& p : {Problem{2, 1, 512, 6, 128}, Problem{std::min(gpus(), 4), 1, 1024, 8, 128}}) {
    SCOPED_TRACE(describe(p));
    const QkvHost in = qkv_random_inputs(p, 5 + uint32_t(p.ranks));
    std::mutex mu;
    std::vector<std::string> failures;
    comm::run_ranks(p.ranks, comm::Launch::threads, [&](comm::Rank& rank) {
      const int r = rank.rank();
      QkvDevice dev(in, r);
      Layer layer(rank, p, params());
      const QkvOwnerOut want = qkv_reference(p, in, r);
      const QkvInputs qi = dev.inputs();
      std::vector<std::string> bad;
      for (int launch = 0; launch < 2; ++launch) {
        for (int part = 0; part < 3; ++part)
          fill_device(const_cast<uint16_t*>(layer.gathered(part)), 0xFF, want.q.size() * 2);
        XS_CHECK_CUDA(cudaDeviceSynchronize());
        rank.host_barrier();
        layer.pre_attention_qkv(qi);
        sync_or_throw(rank.stream(), r);
        // Complete on return (receiver-complete), before any host synchronisation with the peers.
        const std::vector<float>* refs[3] = {&want.q, &want.k, &want.v};
        for (int part = 0; part < 3; ++part) {
          const std::string e = compare_qkv(download(layer.gathered(part), want.q.size()), *refs[part], "qkv");
          if (!e.empty()) bad.push_back(fmt::format("rank {} launch {} part {}: {}", r, launch, part, e));
        }
        rank.host_barrier();
      }
      std::lock_guard lock(mu);
      failures.insert(failures.end(), bad.begin(), bad.end());
    });
    for (const auto& f : failures) ADD_FAILURE() << f;
  }
}

// ---- P source ranks on one GPU ------------------------------------------------
// The fused kernels take each owner's buffers and counters as plain pointers, so one
// GPU can stand in for P ranks: every owner's window is a local buffer, and the P
// sources' kernels run one after the other on one stream (nothing in them waits for
// another source). That runs the kernels' P > 1 index maps, owner offsets and signal
// counts for P = 2, 4 and 8 without NCCL; only the transport (NVLink) is left out.

int sm_count() {
  int sms = 0;
  XS_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  return sms;
}

// Heads [r·H/P, (r+1)·H/P) of full [B, S, H, D] tensors: what rank r's attention reads
// after the pre-attention All-to-All, [B, S, H/P, D] as bf16 bits.
std::vector<uint16_t> head_group(const Problem& p, const std::vector<float>& full, int r) {
  const int64_t B = p.batch, S = p.seq, H = p.heads, Hp = p.heads_per_rank(), D = p.head_dim;
  std::vector<uint16_t> g(std::size_t(B * S * Hp * D));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < Hp; ++h)
        for (int64_t d = 0; d < D; ++d)
          g[((b * S + s) * Hp + h) * D + d] = attention::float_to_bf16_bits(full[((b * S + s) * H + r * Hp + h) * D + d]);
  return g;
}

TEST(UlyssesGpu, FusedEpilogueDeliversEveryOwnersRowsOnOneGpu) {
  // P = 2 (B = 2, D = 64), P = 4 with padding (valid < S), P = 8 (one 128-row tile per slice).
  Problem padded{4, 1, 1024, 8, 128};
  padded.valid = 900;
  for (const Problem& p : {Problem{2, 2, 512, 6, 64}, padded, Problem{8, 1, 1024, 16, 128}}) {
    SCOPED_TRACE(describe(p));
    const int P = p.ranks;
    const int64_t B = p.batch, S = p.seq, R = p.rows_per_rank(), H = p.heads, Hp = p.heads_per_rank(),
                  D = p.head_dim;
    const Inputs in = make_inputs(p, 77 + uint32_t(P));
    const std::size_t gathered = std::size_t(B * S * Hp * D), owned = std::size_t(B * R * H * D);
    std::vector<DeviceBuffer<uint16_t>> q, k, v, plain, owner_out;
    std::vector<attention::FwdArgs> args(P);
    std::vector<attention::FwdConfig> cfg(P);
    std::vector<std::vector<uint16_t>> plain_host(P);
    DeviceBuffer<uint32_t> counters(std::size_t(P) * P);  // [owner][source]
    fill_device(counters.get(), 0, counters.size() * 4);
    for (int r = 0; r < P; ++r) {
      q.push_back(upload(head_group(p, in.fq, r)));
      k.push_back(upload(head_group(p, in.fk, r)));
      v.push_back(upload(head_group(p, in.fv, r)));
      plain.emplace_back(gathered);
      owner_out.emplace_back(owned);
      auto view = [&](const uint16_t* b, int64_t rows) {
        attention::Tensor4 t = attention::Tensor4::bshd(const_cast<uint16_t*>(b), B, rows, Hp, D);
        t.stride_b = S * Hp * D;
        return t;
      };
      args[r].q = view(q[r].get(), S);
      args[r].k = view(k[r].get(), p.keys());  // padded rows are not keys
      args[r].v = view(v[r].get(), p.keys());
      args[r].o = view(plain[r].get(), S);
      cfg[r] = attention::choose_config(attention::validate(args[r]), sm_count());
      cfg[r].tiles = choose_schedule(p, r, cfg[r].grid, params()).tiles;
      // The same kernel and tile order without the remote-store epilogue: what each owner must get, bitwise.
      attention::flash_fwd_with(args[r], cfg[r], nullptr);
      XS_CHECK_CUDA(cudaDeviceSynchronize());
      plain_host[r] = download(plain[r].get(), gathered);
    }
    std::vector<uint32_t> expected(std::size_t(P) * P, 0);
    for (FusedSignal sig : {FusedSignal::per_cta, FusedSignal::per_slice, FusedSignal::by_agent}) {
      SCOPED_TRACE(to_string(sig));
      for (auto& o : owner_out) fill_device(o.get(), 0xFF, owned * 2);  // NaN poison
      for (int r = 0; r < P; ++r) {
        FusedTargets t;
        for (int j = 0; j < P; ++j) {
          t.out[j] = owner_out[j].get();
          t.counter[j] = counters.get() + j * P + r;  // owner j's counter for source r
          expected[std::size_t(j) * P + r] += fused_signals_per_forward(p, sig, cfg[r].grid, cfg[r].consumer_wgs);
        }
        t.geo = fused_geometry(p, r);
        t.signal = sig;
        launch_fused_attention(args[r], cfg[r], t, nullptr);
      }
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      // Owner j's [B, R, H, D]: row s of its slice, head h = rank h / Hp's head h % Hp at row j·R + s.
      for (int j = 0; j < P; ++j) {
        const auto got = download(owner_out[j].get(), owned);
        std::size_t bad = 0, first = 0;
        for (int64_t b = 0; b < B; ++b)
          for (int64_t s = 0; s < R; ++s)
            for (int64_t h = 0; h < H; ++h)
              for (int64_t d = 0; d < D; ++d) {
                const std::size_t i = std::size_t(((b * R + s) * H + h) * D + d);
                const uint16_t want = plain_host[h / Hp][std::size_t(((b * S + j * R + s) * Hp + h % Hp) * D + d)];
                if (got[i] != want && bad++ == 0) first = i;
              }
        EXPECT_EQ(bad, 0u) << "owner " << j << ": " << bad << " of " << owned << " elements differ from the plain kernel"
                           << " (first at " << first << ")";
      }
      EXPECT_EQ(counters.to_host(expected.size()), expected) << "signal counts per (owner, source)";
    }
    if (P == 2) {  // and the plain kernel against fp64 (the attention tests pin it down more tightly)
      std::vector<float> keys_k, keys_v;
      for (int64_t b = 0; b < B; ++b) {
        keys_k.insert(keys_k.end(), in.fk.begin() + b * S * H * D, in.fk.begin() + (b * S + p.keys()) * H * D);
        keys_v.insert(keys_v.end(), in.fv.begin() + b * S * H * D, in.fv.begin() + (b * S + p.keys()) * H * D);
      }
      const auto ref = attention::reference_fwd(in.fq, keys_k, keys_v, B, S, p.keys(), H, D, p.causal,
                                                1.0 / std::sqrt(double(D)));
      double num = 0, den = 0;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t s = 0; s < S; ++s)
          for (int64_t h = 0; h < H; ++h)
            for (int64_t d = 0; d < D; ++d) {
              const double x = attention::bf16_bits_to_float(
                  plain_host[h / Hp][std::size_t(((b * S + s) * Hp + h % Hp) * D + d)]);
              const double y = ref.o[std::size_t(((b * S + s) * H + h) * D + d)];
              num += (x - y) * (x - y);
              den += y * y;
            }
      EXPECT_LT(std::sqrt(num / den), 1e-2);
    }
  }
}

TEST(UlyssesQkvGpu, EveryOwnerGetsItsHeadsOnOneGpu) {
  // P = 2, P = 4 (B = 2), P = 8 (H/P = 2, one column tile per owner and part).
  for (const Problem& p : {Problem{2, 1, 512, 6, 128}, Problem{4, 2, 1024, 8, 128}, Problem{8, 1, 1024, 16, 128}}) {
    SCOPED_TRACE(describe(p));
    const int P = p.ranks;
    const QkvHost in = qkv_random_inputs(p, 31 + uint32_t(P));
    const std::size_t gathered = std::size_t(p.batch * p.seq * p.heads_per_rank() * p.head_dim);
    std::vector<std::unique_ptr<QkvDevice>> dev;
    std::vector<DeviceBuffer<uint16_t>> out;  // owner j's q, k, v at 3 j + part
    std::vector<DeviceBuffer<int>> order;
    std::vector<QkvArgs> a(P);
    std::vector<int> grid(P);
    // done [owner][source]; raised [owner][source]: the ready flags the sources raise;
    // ready: every source's view of its owners' flags, raised here (no owner runs).
    DeviceBuffer<uint32_t> done(std::size_t(P) * P), raised(std::size_t(P) * P), ready(std::size_t(P) * P);
    fill_device(done.get(), 0, done.size() * 4);
    fill_device(raised.get(), 0, raised.size() * 4);
    for (int j = 0; j < 3 * P; ++j) out.emplace_back(gathered);
    for (int r = 0; r < P; ++r) {
      dev.push_back(std::make_unique<QkvDevice>(in, r));
      grid[r] = std::min(sm_count(), qkv_tiles(p));
      const QkvSchedule sched = choose_qkv_schedule(p, r, grid[r], params());
      order.push_back(upload(sched.order));
      a[r] = qkv_shape_args(p, r);
      qkv_bind_inputs(a[r], dev[r]->inputs());
      a[r].order = order[r].get();
      a[r].n_entries = int(sched.order.size());
      for (int j = 0; j < P; ++j) {
        for (int part = 0; part < 3; ++part) a[r].dst[part][j] = out[3 * j + part].get();
        a[r].done[j] = done.get() + j * P + r;
        a[r].ready_out[j] = raised.get() + j * P + r;
      }
      a[r].ready_in = ready.get() + r * P;
    }
    std::vector<QkvOwnerOut> want;
    for (int j = 0; j < P; ++j) want.push_back(qkv_reference(p, in, j));
    for (uint32_t launch = 1; launch <= 2; ++launch) {  // the agent's release, then the consumers'
      SCOPED_TRACE("launch " + std::to_string(launch));
      for (auto& o : out) fill_device(o.get(), 0xFF, gathered * 2);  // NaN poison
      copy_to_device(ready.get(), std::vector<uint32_t>(ready.size(), launch).data(), ready.size() * 4);
      for (int r = 0; r < P; ++r) {
        a[r].epoch = launch;
        a[r].release_by_agent = launch == 1 ? 1 : 0;
        launch_qkv_fused(a[r], std::min(grid[r], a[r].n_entries), nullptr);
      }
      const cudaError_t e = cudaDeviceSynchronize();
      ASSERT_EQ(e, cudaSuccess) << cudaGetErrorString(e) << " " << qkv_explain_failure();
      for (int j = 0; j < P; ++j) {
        const std::vector<float>* refs[3] = {&want[j].q, &want[j].k, &want[j].v};
        const char* names[3] = {"q", "k", "v"};
        for (int part = 0; part < 3; ++part)
          EXPECT_EQ(compare_qkv(download(out[3 * j + part].get(), gathered), *refs[part], names[part]), "")
              << "owner " << j;
      }
      EXPECT_EQ(done.to_host(done.size()), std::vector<uint32_t>(done.size(), launch * qkv_signals_per_source(p)))
          << "completion counts per (owner, source)";
      EXPECT_EQ(raised.to_host(raised.size()), std::vector<uint32_t>(raised.size(), launch))
          << "every source raises its ready flag at every owner";
    }
  }
}


TEST(UlyssesGpu, FusedEqualsSerialTwoRanks) {
  if (gpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
  run_case({2, 1, 1024, 4, 64});
  run_case({2, 1, 2048, 6, 128});
  run_case({2, 2, 512, 4, 64});
  run_case({2, 1, 1024, 4, 128, true});
}

TEST(UlyssesGpu, FusedEqualsSerialFourRanks) {
  if (gpus() < 4) GTEST_SKIP() << "needs 4 GPUs (" << gpus() << " visible)";
  run_case({4, 1, 2048, 8, 128});
  run_case({4, 1, 1024, 4, 64, true});
}

// Padded sequences (Problem::valid): the padded rows' K and V are NaN and must never be
// read; every path still equals the serial one bitwise and the fp64 attention over the
// valid keys. (One GPU: dit's PaddingChangesNoRealToken runs flash_fwd over padded rows.)
TEST(UlyssesGpu, PaddedRowsAreNotKeys) {
  if (gpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
  run_case(Problem{2, 1, 512, 6, 128, false, 400});  // rank 1 holds 144 real rows of 256
  run_case(Problem{2, 1, 1024, 4, 64, false, 300});  // rank 1 holds padding only
  run_case(Problem{2, 2, 512, 4, 64, false, 385});   // two batches, one valid row in the last key tile
}

TEST(UlyssesGpu, SlowPeerOnlyDelaysTheReceiver) {
  if (gpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
  run_case({2, 1, 1024, 4, 64}, 1);
}

TEST(UlyssesGpu, OneRankNeedsNoLayer) {
  try {
    comm::run_ranks(1, comm::Launch::threads, [](comm::Rank& rank) { Layer layer(rank, {1, 1, 4096, 24, 128}, params()); });
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("P = 1 needs no Ulysses layer"), std::string::npos) << e.what();
  }
}

TEST(UlyssesGpu, TooManyRanksIsAClearError) {
  try {
    comm::run_ranks(1, comm::Launch::threads, [](comm::Rank& rank) {
      Layer layer(rank, {gpus() + 1, 1, 4096, 24 * (gpus() + 1), 128}, params());
    });
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("GPUs, but only"), std::string::npos) << e.what();
  }
}

// The child re-executes this binary with a 300 ms wait budget; `timeout` turns a hang
// into exit status 124 (a failure, not a stuck test).
std::pair<int, std::string> run_child(const std::string& name) {
  return common::run_self_as_child(name, "XSTAGE_WAIT_TIMEOUT_MS=300 timeout 60");
}

int qkv_unready_child() {
  const Problem p{1, 1, 256, 4, 128};
  OneRankQkv k(p, qkv_random_inputs(p, 3));
  k.a.ready_out[0] = k.flags.get() + 2;  // raises a flag the kernel does not wait on
  k.a.epoch = 1;
  launch_qkv_fused(k.a, 4, nullptr);
  const cudaError_t e = cudaDeviceSynchronize();
  const xstage::sync::WaitReport raw = xstage::sync::process_report().read();  // host-mapped: readable after the fault
  std::printf("child: report flag %d site %d index %d\n", raw.flag, raw.site, raw.index);
  std::printf("child: sync: %s; %s\n", cudaGetErrorString(e), qkv_explain_failure().c_str());
  std::fflush(stdout);
  std::_Exit(e == cudaSuccess ? 0 : 7);
}

// One GPU stands in for P = 2 (as in FusedEpilogueDeliversEveryOwnersRowsOnOneGpu): source
// rank 0's fused kernel stores its tiles into both owners' buffers, source rank 1's never
// runs, and owner 0's receiver-complete wait (the Layer's, launch_wait_sources) must time
// out naming source rank 1 and its slice counter, not hang.
int absent_source_one_gpu_child() {
  const Problem p{2, 1, 512, 4, 64};
  const int P = p.ranks;
  const int64_t R = p.rows_per_rank(), H = p.heads, Hp = p.heads_per_rank(), D = p.head_dim, S = p.seq;
  const Inputs in = make_inputs(p, 5);
  DeviceBuffer<uint16_t> q = upload(head_group(p, in.fq, 0)), k = upload(head_group(p, in.fk, 0)),
                         v = upload(head_group(p, in.fv, 0)), o(std::size_t(S * Hp * D));
  std::vector<DeviceBuffer<uint16_t>> owner_out;
  for (int j = 0; j < P; ++j) owner_out.emplace_back(std::size_t(R * H * D));
  DeviceBuffer<uint32_t> counters(std::size_t(P) * P);  // [owner][source]
  fill_device(counters.get(), 0, counters.size() * 4);
  attention::FwdArgs args;
  args.q = attention::Tensor4::bshd(q.get(), 1, S, Hp, D);
  args.k = attention::Tensor4::bshd(k.get(), 1, S, Hp, D);
  args.v = attention::Tensor4::bshd(v.get(), 1, S, Hp, D);
  args.o = attention::Tensor4::bshd(o.get(), 1, S, Hp, D);
  attention::FwdConfig cfg = attention::choose_config(attention::validate(args), sm_count());
  cfg.tiles = choose_schedule(p, 0, cfg.grid, params()).tiles;
  FusedTargets t;
  for (int j = 0; j < P; ++j) {
    t.out[j] = owner_out[j].get();
    t.counter[j] = counters.get() + j * P;  // owner j's counter for source 0
  }
  t.geo = fused_geometry(p, 0);
  launch_fused_attention(args, cfg, t, nullptr);  // source 1 never launches
  SourceCounts want;
  for (int src = 0; src < P; ++src) want.v[src] = fused_signals_per_forward(p, t.signal, cfg.grid, cfg.consumer_wgs);
  launch_wait_sources(counters.get(), P, want, {comm::wait_timeout_ns(), 0}, nullptr);  // owner 0
  const cudaError_t e = cudaDeviceSynchronize();
  std::printf("child: owner 0 sync: %s; %s\n", cudaGetErrorString(e), xstage::sync::take_report().c_str());
  std::fflush(stdout);
  std::_Exit(e == cudaSuccess ? 0 : 7);
}

// The copy-engine drain of rank 0 of P = 2 at S = 64K (owner 1's rows done about half-way
// through the attention, some 18 ms in) with a 5 ms wait budget, well short of them (with
// 20 ms the rows had sometimes all arrived and only the copy ran late, which names no
// count): the first forward's wait for owner 1's count must end with one error naming the
// rank, owner, chunk and counts, and the process must exit (the stuck stream wait
// released), not hang.
int drain_deadline_child() {
  const auto params = xstage::burstgap::read_params_or_default("").find("host", "st16");
  try {
    xstage::ulysses::run_host_link_bench({65536, 2, 24, 128}, 0, params, 1, 1, 0);
  } catch (const std::exception& e) {
    std::printf("child: %s\n", e.what());
    std::fflush(stdout);
    std::_Exit(7);
  }
  return 0;
}

int child_main(const std::string& name) {
  if (name == "qkv_unready") return qkv_unready_child();
  if (name == "drain_deadline") return drain_deadline_child();
  if (name == "absent_one_gpu") return absent_source_one_gpu_child();
  if (name != "absent") return 2;
  try {
    const Problem p{2, 1, 1024, 4, 64};
    comm::run_ranks(2, comm::Launch::threads, [&](comm::Rank& rank) {
      const std::size_t n = p.rows_per_rank() * p.heads * p.head_dim;
      DeviceBuffer<uint16_t> x(n);
      fill_device(x.get(), 0, n * 2);
      Layer layer(rank, p, params());
      layer.set_inputs(x.get(), x.get(), x.get());
      layer.pre_attention();
      if (rank.rank() == 1) {  // absent: never sends its slices
        XS_CHECK_CUDA(cudaStreamSynchronize(rank.stream()));
        std::this_thread::sleep_for(std::chrono::seconds(30));
        return;
      }
      layer.fused(Completion::receiver_complete);
      const cudaError_t e = cudaStreamSynchronize(rank.stream());
      std::fflush(stdout);
      std::printf("child: rank 0 sync: %s; %s\n", cudaGetErrorString(e), xstage::sync::take_report().c_str());
      std::fflush(stdout);
      std::_Exit(e == cudaSuccess ? 0 : 7);
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child %s: %s\n", name.c_str(), e.what());
    return 1;
  }
  return 3;
}

TEST(UlyssesGpu, AbsentPeerTimesOutNamingRankAndFlag) {
  if (gpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
  auto [code, out] = run_child("absent");
  EXPECT_EQ(code, 7) << out;
  EXPECT_NE(out.find("ulysses: device wait timed out on rank 0"), std::string::npos) << out;
  EXPECT_NE(out.find("source rank 1's tiles (flag: slice counter 1"), std::string::npos) << out;
}

TEST(UlyssesGpu, AbsentSourceTimesOutNamingRankAndFlagOnOneGpu) {
  auto [code, out] = run_child("absent_one_gpu");
  EXPECT_EQ(code, 7) << out;
  EXPECT_NE(out.find("ulysses: device wait timed out on rank 0"), std::string::npos) << out;
  EXPECT_NE(out.find("source rank 1's tiles (flag: slice counter 1"), std::string::npos) << out;
  EXPECT_EQ(out.find("source rank 0's tiles"), std::string::npos) << "source 0's tiles all arrived:\n" << out;
  std::printf("%s", out.c_str());
}

TEST(UlyssesQkvGpu, AnOwnerThatNeverStartsTimesOutNamingIt) {
  auto [code, out] = run_child("qkv_unready");
  EXPECT_EQ(code, 7) << out;
  EXPECT_NE(out.find("fused QKV: device wait timed out on rank 0 block"), std::string::npos) << out;
  EXPECT_NE(out.find("ready flag of owner rank 0"), std::string::npos) << out;
  EXPECT_NE(out.find("(index 0, expected 1, saw 0)"), std::string::npos) << out;
}

int main(int argc, char** argv) {
  common::request_stream_queues();  // before any CUDA call
  return common::test_main_with_children(argc, argv, child_main);
}

// Over the host link (the other owners' outputs and counters in mapped pinned host
// memory) the fused kernel writes exactly what it writes with every owner in HBM, for
// a middle rank of P = 2, 4 and 8, in the advisor's order with the host-link fit, and so
// does the copy-engine drain in the advisor's chunks, in one-block chunks (a counter per
// 128 rows) and with one chunk per owner; every variant of the bench runs and takes time.
TEST(UlyssesHostLink, OutputsEqualTheHbmOnesBitwise) {
  auto params = xstage::burstgap::read_params_or_default("").find("host", "st16");
  for (int P : {2, 4, 8}) {
    for (int chunk : {-1, 1}) {
      const xstage::ulysses::BenchConfig c{4096, P, 24, 64};
      const auto row = xstage::ulysses::run_host_link_bench(c, P / 2, params, 1, 3, chunk);
      EXPECT_TRUE(row.bitwise_equal) << "P = " << P << ", chunk " << chunk;
      if (chunk >= 0) {
        EXPECT_EQ(row.drain_chunk_blocks, chunk);
      }
      for (double ms : {row.attention_guided_ms, row.attention_row_major_ms, row.attention_owner_ms,
                        row.fused_guided_ms, row.fused_row_major_ms, row.fused_sm_guided_ms, row.fused_ce_drain_ms,
                        row.fused_ce_owner_ms, row.exchange_after_ms, row.copy_op_us, row.copy_GBps})
        EXPECT_GT(ms, 0) << "P = " << P << ", chunk " << chunk;
      EXPECT_GT(row.link_GBps, 0);
    }
  }
}

TEST(UlyssesHostLink, ADrainPastItsWaitBudgetNamesTheCount) {
  auto [code, out] = common::run_self_as_child("drain_deadline", "XSTAGE_WAIT_TIMEOUT_MS=5 timeout 60");
  EXPECT_EQ(code, 7) << out;
  EXPECT_NE(out.find("copy-engine drain: rank 0 waited 0.005 s for owner 1's chunk 0 of 1"), std::string::npos)
      << out;
  EXPECT_NE(out.find("expected >= "), std::string::npos) << out;
}

// The fused QKV projection with the other owners' q, k, v over the host link gives the
// HBM outputs bitwise (a middle rank of P = 2, 4 and 8), its counts and its numbers stay
// right, and both host-link variants take time.
TEST(UlyssesHostLink, QkvOutputsEqualTheHbmOnesBitwise) {
  const auto params = xstage::burstgap::read_params_or_default("");
  const auto& host = params.find("host", "st16");
  for (int P : {2, 4, 8}) {
    const auto row =
        xstage::ulysses::run_qkv_bench(4096, P, 24, P / 2, params.for_exchange(P), 1, 3, {0}, 1, &host);
    EXPECT_TRUE(row.host_link) << "P = " << P;
    EXPECT_TRUE(row.host_bitwise_equal) << "P = " << P;
    EXPECT_TRUE(row.counts_ok()) << row.count_errors;
    EXPECT_EQ(row.elements_off, 0) << "P = " << P;
    EXPECT_GT(row.owners_hbm_ms, 0);
    EXPECT_GT(row.fused_host_ms, 0);
    EXPECT_GT(row.predicted_host_ms, row.owners_hbm_ms);
  }
}

// The copy engine's costs as both host-link benches measure them: device-to-host copies
// into mapped host memory run at a PCIe rate (H200: about 55 GB/s; a gen-5 x16 link tops
// out near 64), a stream operation costs microseconds, with one stream and with several
// under the HBM load; a probe without copies is refused in one line.
TEST(UlyssesHostLink, CopyCostsMeasureARateAndACostPerOperation) {
  constexpr std::size_t kBytes = std::size_t(16) << 20, kCopy = std::size_t(64) << 10;
  xstage::DeviceBuffer<unsigned char> from(kBytes);
  xstage::MappedHostBuffer<unsigned char> to(kBytes);
  for (int streams : {1, 3}) {
    xstage::bench::CopyCostProbe probe;
    probe.streams = streams;
    probe.pairs = 8;
    probe.under_hbm_load = streams > 1;
    probe.copy = [&](cudaStream_t stream, int r, int i) {
      const std::size_t at = std::size_t(r * 8 + i) * kCopy;
      XS_CHECK_CUDA(cudaMemcpyAsync(to.host() + at, from.get() + at, kCopy, cudaMemcpyDeviceToHost, stream));
    };
    probe.copy_bytes = double(kCopy);
    probe.bulk = [&](cudaStream_t stream) {
      XS_CHECK_CUDA(cudaMemcpyAsync(to.host(), from.get(), kBytes, cudaMemcpyDeviceToHost, stream));
    };
    probe.bulk_bytes = double(kBytes);
    const auto c = xstage::bench::measure_copy_costs(probe);
    EXPECT_GT(c.GBps, 5.0) << streams;
    EXPECT_LT(c.GBps, 80.0) << streams;
    EXPECT_GT(c.op_ms, 0.0) << streams;
    EXPECT_LT(c.op_ms, 0.1) << streams;
  }
  xstage::bench::CopyCostProbe none;
  none.bulk_bytes = double(kBytes);
  EXPECT_THROW(xstage::bench::measure_copy_costs(none), std::exception);
}

// The SMs' read rate of mapped host memory (the MoE drain's reads back, in its prediction):
// a PCIe rate (H200: about 51 GB/s), and no buffer is refused in one line.
TEST(UlyssesHostLink, HostReadRateIsAPcieRate) {
  xstage::MappedHostBuffer<unsigned char> from(std::size_t(64) << 20);
  const double GBps = xstage::bench::measure_host_read_GBps(from.device(), from.size(), nullptr);
  EXPECT_GT(GBps, 5.0);
  EXPECT_LT(GBps, 80.0);
  EXPECT_THROW(xstage::bench::measure_host_read_GBps(nullptr, 64, nullptr), std::exception);
}
