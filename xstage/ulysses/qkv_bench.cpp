// One configuration of `xstage bench qkv` (xstage/bench/qkv_bench.hpp): the fused QKV
// projection + pre-attention All-to-All kernel on one GPU against the serial path's
// projection (cuBLAS GEMM + qk_norm_rope), with a correctness check of the kernel
// against that path and a check of its signal counts.
//
// The baseline is the DiT's own unfused QKV tail (xstage/dit: gemm_bf16_f32 and
// kernels::qk_norm_rope), so this file is built into xs_ulysses_bench, which links
// xs_dit; xs_ulysses itself stays below the DiT.
#include <cublas_v2.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

#include "common/check.hpp"
#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "xstage/attention/attention.hpp"
#include "xstage/attention/attention_cuda.hpp"
#include "xstage/bench/event_timer.hpp"
#include "xstage/bench/qkv_bench.hpp"
#include "xstage/dit/dit_cuda.hpp"
#include "xstage/ulysses/qkv.hpp"
#include "xstage/ulysses/qkv_fused.hpp"

namespace xstage::ulysses {

namespace {

// What every step of a row works on, on GPU 0: the stream and cuBLAS handle, the
// projection's inputs (h, W random bf16; vectors from a seeded host generator), the
// baseline's buffers and the kernel's counters and flags.
struct QkvRig {
  Problem p;
  int64_t L, C, D = kQkvHeadDim, Hp;
  int sms = 0;
  cudaStream_t st = nullptr;
  cublasHandle_t blas = nullptr;
  DeviceBuffer<std::uint16_t> h, w;
  DeviceBuffer<float> bias, qn, kn, cosd, sind;
  QkvInputs in;
  DeviceBuffer<float> qkv;
  DeviceBuffer<std::uint16_t> q, k, v;
  DeviceBuffer<uint32_t> flags{2 * kMaxRanks};

  QkvRig(int64_t seq, int ranks, int heads)
      : p{ranks, 1, seq, heads, kQkvHeadDim}, L(qkv_rows(p)), C(qkv_hidden(p)), Hp(p.heads_per_rank()),
        h(size_t(L * C)), w(size_t(3 * C * C)), qkv(size_t(L * 3 * C)), q(size_t(L * C)), k(size_t(L * C)),
        v(size_t(L * C)) {
    XS_CHECK_CUDA(cudaSetDevice(0));
    XS_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    XS_CHECK_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    XS_ASSERT(cublasCreate(&blas) == CUBLAS_STATUS_SUCCESS && cublasSetStream(blas, st) == CUBLAS_STATUS_SUCCESS,
              "bench qkv: cannot create a cuBLAS handle");
    attention::fill_random_bf16(h.get(), L * C, 101 + seq, 1.0f, st);
    attention::fill_random_bf16(w.get(), 3 * C * C, 202 + heads, float(1.0 / std::sqrt(double(C))), st);
    upload_vectors(uint32_t(seq * 31 + heads));
    in = {.h = h.get(), .w = w.get(), .bias = bias.get(), .q_norm = qn.get(), .k_norm = kn.get(),
          .cos = cosd.get(), .sin = sind.get()};
  }
  ~QkvRig() {
    cublasDestroy(blas);
    cudaStreamDestroy(st);
  }
  QkvRig(const QkvRig&) = delete;
  QkvRig& operator=(const QkvRig&) = delete;

  // Rotary angles, bias and norm weights, drawn in that order.
  void upload_vectors(uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> cs(size_t(L * D / 2)), sn(cs.size());
    for (size_t i = 0; i < cs.size(); ++i) {
      const float a = 3.1f * nd(rng);
      cs[i] = std::cos(a);
      sn[i] = std::sin(a);
    }
    auto vec = [&](int64_t n, float base, float spread) {
      std::vector<float> x(static_cast<std::size_t>(n));
      for (auto& e : x) e = base + spread * nd(rng);
      return x;
    };
    bias = upload(vec(3 * C, 0.f, 0.2f));
    qn = upload(vec(D, 1.f, 0.2f));
    kn = upload(vec(D, 1.f, 0.2f));
    cosd = upload(cs);
    sind = upload(sn);
  }

  // The serial path's projection: q, k, v [L, H, D] bf16.
  void baseline() {
    dit::gemm_bf16_f32(blas, h.get(), w.get(), qkv.get(), L, 3 * C, C);
    dit::kernels::qk_norm_rope(q.get(), k.get(), v.get(), qkv.get(), bias.get(), qn.get(), kn.get(), cosd.get(),
                               sind.get(), L, p.heads, D, st);
  }

  void sync(const char* what) const {
    const cudaError_t e = cudaStreamSynchronize(st);
    XS_ASSERT(e == cudaSuccess, "bench qkv: {}: {} {}", what, cudaGetErrorString(e), qkv_explain_failure());
  }

  // Arguments of a launch that signals through `flags`: done counters first, then ready flags.
  void bind_flags(QkvArgs& a, int owners) const {
    for (int j = 0; j < owners; ++j) {
      a.done[j] = flags.get() + j;
      a.ready_out[j] = flags.get() + kMaxRanks + j;
    }
    a.ready_in = flags.get() + kMaxRanks;  // the wait budget and report: set by launch_qkv_fused
  }
};

// 1. The kernel in the one-rank layout ([L, H, D], every head local) against the
// baseline, with the launch's grid and tail split, so the check covers one-head entries
// where they occur.
void check_one_rank(QkvRig& g, QkvBenchRow& row) {
  const Problem one{1, 1, g.L, g.p.heads, kQkvHeadDim};
  const size_t n = size_t(g.L * g.C);
  DeviceBuffer<std::uint16_t> out[3] = {DeviceBuffer<std::uint16_t>(n), DeviceBuffer<std::uint16_t>(n),
                                        DeviceBuffer<std::uint16_t>(n)};
  const int grid = std::min(g.sms, qkv_tiles(one));
  const auto entries = qkv_split_tail(one, qkv_tile_order(one, 0, QkvOrder::natural), grid);
  auto order = upload(entries);
  QkvArgs a = qkv_shape_args(one, 0);
  qkv_bind_inputs(a, g.in);
  a.order = order.get();
  a.n_entries = static_cast<int>(entries.size());
  for (int part = 0; part < 3; ++part) {
    a.dst[part][0] = out[part].get();
    XS_CHECK_CUDA(cudaMemsetAsync(out[part].get(), 0xFF, n * 2, g.st));  // NaN poison
  }
  XS_CHECK_CUDA(cudaMemsetAsync(g.flags.get(), 0, g.flags.size() * 4, g.st));
  g.bind_flags(a, 1);
  a.epoch = 1;
  launch_qkv_fused(a, grid, g.st);
  g.baseline();
  g.sync("one-rank check");
  const std::uint16_t* base[3] = {g.q.get(), g.k.get(), g.v.get()};
  for (int part = 0; part < 3; ++part) {
    const auto got = out[part].to_host(n);
    const auto want = bench::to_host(base[part], n);
    for (size_t i = 0; i < got.size(); ++i) {
      const double x = attention::bf16_bits_to_float(got[i]), y = attention::bf16_bits_to_float(want[i]);
      const double err = std::abs(x - y);
      if (!within_one_bf16_step(x, y)) ++row.elements_off;
      row.max_abs_diff = std::isfinite(err) ? std::max(row.max_abs_diff, err) : INFINITY;
    }
  }
}

// 2. The advisor's orders for rank `rank`'s share, one per raster group, and the first
// group's order without its tail split when the split changed it.
struct Orders {
  std::size_t groups = 0;  // scheds[0 .. groups): one per raster group; then the unsplit one, if any
  std::vector<QkvSchedule> scheds;
  std::vector<DeviceBuffer<int>> device;
  int grid = 0;
};

Orders choose_orders(const QkvRig& g, int rank, const burstgap::ModelParams& params, const std::vector<int>& groups) {
  Orders o;
  o.grid = std::min(g.sms, qkv_tiles(g.p));
  for (int group : groups) o.scheds.push_back(choose_qkv_schedule(g.p, rank, o.grid, params, {}, group));
  o.groups = o.scheds.size();
  if (o.scheds[0].split_tail)
    o.scheds.push_back(choose_qkv_schedule(g.p, rank, o.grid, params, {}, groups[0], false));
  for (const auto& s : o.scheds) o.device.push_back(upload(s.order));
  return o;
}

// Loopback launches with every owner local; each order's counts checked after
// `checks` launches per release mode (both modes add the same counts).
void check_counts(QkvRig& g, QkvArgs& a, const Orders& o, int checks, QkvBenchRow& row) {
  const uint32_t want = qkv_signals_per_source(g.p);
  for (int agent : {1, 0})
    for (std::size_t k = 0; k < o.device.size(); ++k)
      for (int check = 0; check < checks; ++check) {
        XS_CHECK_CUDA(cudaMemsetAsync(g.flags.get(), 0, g.flags.size() * 4, g.st));
        a.order = o.device[k].get();
        a.n_entries = static_cast<int>(o.scheds[k].order.size());
        a.epoch = 1;
        a.release_by_agent = agent;
        launch_qkv_fused(a, o.grid, g.st);
        g.sync("loopback count check");
        const auto counts = g.flags.to_host(size_t(g.p.ranks));
        for (int j = 0; j < g.p.ranks; ++j)
          if (counts[j] != want)
            row.count_errors += fmt::format("{}{} order {} launch {}: owner {} counted {} of {}",
                                            row.count_errors.empty() ? "" : "; ", agent ? "agent" : "consumers", k,
                                            check, j, counts[j], want);
      }
}

// 3. Timing, in turns: the baseline, the fused kernel with each order, then the first
// order released by the consumers.
void time_variants(QkvRig& g, QkvArgs& a, const Orders& o, int warmup, int samples, QkvBenchRow& row) {
  bench::EventTimer timer(g.st, "bench qkv: timing", qkv_explain_failure);
  uint32_t epoch = 1;
  auto fused = [&](std::size_t k, int agent) {
    return [&, k, agent](int n) {
      return timer([&] {
        a.order = o.device[k].get();
        a.n_entries = static_cast<int>(o.scheds[k].order.size());
        a.epoch = ++epoch;
        a.release_by_agent = agent;
        launch_qkv_fused(a, o.grid, g.st);
      }, n);
    };
  };
  std::vector<std::function<double(int)>> variants = {[&](int n) { return timer([&] { g.baseline(); }, n); }};
  for (std::size_t k = 0; k < o.device.size(); ++k) variants.push_back(fused(k, 1));
  variants.push_back(fused(0, 0));
  const std::vector<double> ms = bench::medians_in_turns(variants, warmup, samples);
  row.cublas_norm_rope_ms = ms[0];
  for (std::size_t i = 0; i < o.groups; ++i) row.fused_by_group.push_back({o.scheds[i].group, ms[i + 1]});
  row.split_tail = o.scheds[0].split_tail;
  if (row.split_tail) row.fused_unsplit_ms = ms[o.groups + 1];
  row.fused_by_consumer_ms = ms.back();
  row.group = o.scheds[0].group;
  row.fused_loopback_ms = row.fused_by_group[0].second;
  row.tflops_fused = 2.0 * double(g.L) * double(3 * g.C) * double(g.C) / (row.fused_loopback_ms * 1e9);
}

// 4. Over the host link, the first group's order: every owner's q, k, v in its own HBM
// buffer, then the other owners' in mapped pinned host memory, each from poisoned
// buffers (the two must agree bitwise, and this rank's rows must be written), then both
// timed in turns.
void host_link_step(QkvRig& g, QkvArgs a, const Orders& o, const burstgap::ModelParams& link, int warmup,
                    int samples, QkvBenchRow& row) {
  constexpr std::uint16_t kPoison = 0xFFFF;
  const int P = g.p.ranks, r = a.rank;
  const size_t n = size_t(g.p.seq * g.Hp * g.D);  // one owner's [1, S, H/P, D]
  std::vector<DeviceBuffer<std::uint16_t>> hbm;
  std::vector<MappedHostBuffer<std::uint16_t>> host;
  for (int i = 0; i < 3 * P; ++i) {
    hbm.emplace_back(n);
    host.emplace_back(i % P == r ? 0 : n);
  }
  auto bind = [&](bool over_host) {
    for (int i = 0; i < 3 * P; ++i)
      a.dst[i / P][i % P] = over_host && i % P != r ? host[i].device() : hbm[i].get();
  };
  auto owner = [&](int i, bool over_host) {
    if (over_host && i % P != r) return std::vector<std::uint16_t>(host[i].host(), host[i].host() + n);
    return hbm[i].to_host(n);
  };
  auto launch_from_poison = [&](bool over_host) {
    for (int i = 0; i < 3 * P; ++i) {
      XS_CHECK_CUDA(cudaMemsetAsync(hbm[i].get(), 0xFF, n * 2, g.st));
      if (i % P != r) std::fill(host[i].host(), host[i].host() + n, kPoison);
    }
    XS_CHECK_CUDA(cudaMemsetAsync(g.flags.get(), 0, g.flags.size() * 4, g.st));
    bind(over_host);
    a.epoch = 1;
    launch_qkv_fused(a, o.grid, g.st);
    g.sync(over_host ? "host-link check" : "host-link reference");
  };
  a.order = o.device[0].get();
  a.n_entries = static_cast<int>(o.scheds[0].order.size());
  a.release_by_agent = 1;
  launch_from_poison(false);
  std::vector<std::vector<std::uint16_t>> want;
  for (int i = 0; i < 3 * P; ++i) want.push_back(owner(i, false));
  launch_from_poison(true);
  const size_t rows0 = size_t(r * g.p.rows_per_rank()), rows1 = rows0 + size_t(g.p.rows_per_rank());
  bool ok = true;
  for (int i = 0; i < 3 * P && ok; ++i) {
    ok = owner(i, true) == want[i];
    const size_t row_elems = size_t(g.Hp * g.D);
    for (size_t e = rows0 * row_elems; e < rows1 * row_elems && ok; ++e) ok = want[i][e] != kPoison;
  }
  row.host_bitwise_equal = ok;

  bench::EventTimer timer(g.st, "bench qkv: host-link timing", qkv_explain_failure);
  XS_CHECK_CUDA(cudaMemsetAsync(g.flags.get(), 0, g.flags.size() * 4, g.st));
  uint32_t epoch = 0;
  auto variant = [&](bool over_host) {
    return [&, over_host](int k) {
      return timer([&] {
        bind(over_host);
        a.epoch = ++epoch;
        launch_qkv_fused(a, o.grid, g.st);
      }, k);
    };
  };
  std::vector<std::function<double(int)>> variants = {variant(false), variant(true)};
  const std::vector<double> ms = bench::medians_in_turns(variants, warmup, samples);
  row.host_link = true;
  row.owners_hbm_ms = ms[0];
  row.fused_host_ms = ms[1];
  row.remote_bytes = double(g.p.rows_per_rank()) * 3 * double(g.p.heads - g.Hp) * double(g.D) * 2;
  row.predicted_host_ms = row.owners_hbm_ms + burstgap::read_blocked_drain_ns(link, row.remote_bytes) * 1e-6;
}

}  // namespace

QkvBenchRow run_qkv_bench(int64_t seq, int ranks, int heads, int rank, const burstgap::ModelParams& params,
                          int warmup, int samples, const std::vector<int>& groups, int count_checks,
                          const burstgap::ModelParams* host_link) {
  XS_ASSERT(!groups.empty(), "bench qkv: no raster group to time");
  XS_ASSERT(count_checks >= 1, "bench qkv: count checks must be >= 1 (got {})", count_checks);
  for (int g : groups) XS_ASSERT(g >= 0, "bench qkv: raster group {} must be >= 0 (0: the L2 rule)", g);
  validate_qkv(Problem{ranks, 1, seq, heads, kQkvHeadDim});
  XS_ASSERT(rank >= 0 && rank < ranks, "bench qkv: --rank {} is not a rank of P = {}", rank, ranks);
  QkvRig g(seq, ranks, heads);
  QkvBenchRow row;
  row.seq = seq;
  row.ranks = ranks;
  row.heads = heads;
  row.rank = rank;
  check_one_rank(g, row);

  // Rank `rank`'s share with every owner's buffers and flags local.
  const Orders orders = choose_orders(g, rank, params, groups);
  row.order = orders.scheds[0].reason;
  const size_t n = size_t(seq * g.Hp * g.D);
  DeviceBuffer<std::uint16_t> scratch[3] = {DeviceBuffer<std::uint16_t>(n), DeviceBuffer<std::uint16_t>(n),
                                            DeviceBuffer<std::uint16_t>(n)};
  QkvArgs a = qkv_shape_args(g.p, rank);
  qkv_bind_inputs(a, g.in);
  for (int j = 0; j < ranks; ++j)
    for (int part = 0; part < 3; ++part) a.dst[part][j] = scratch[part].get();
  g.bind_flags(a, ranks);
  check_counts(g, a, orders, count_checks, row);
  time_variants(g, a, orders, warmup, samples, row);
  if (host_link) host_link_step(g, a, orders, *host_link, warmup, samples, row);
  return row;
}

}  // namespace xstage::ulysses
