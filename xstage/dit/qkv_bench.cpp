// `xstage bench qkv` (declared in xstage/dit_cuda.hpp): the fused QKV projection
// + pre-attention All-to-All kernel on one GPU, against the serial path's
// projection (cuBLAS GEMM + qk_norm_rope), with a correctness check of the kernel
// against that path and a check of its signal counts. Lives with the DiT because
// the baseline is the DiT's own projection.
#include <cublas_v2.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

#include "common/check.hpp"
#include "ulysses/qkv_fused.hpp"
#include "xstage/attention.hpp"
#include "xstage/attention_cuda.hpp"
#include "xstage/bench_timing.hpp"
#include "xstage/check_cuda.hpp"
#include "xstage/comm.hpp"
#include "xstage/device_buffer.hpp"
#include "xstage/dit_cuda.hpp"
#include "xstage/ulysses_qkv.hpp"

namespace xstage::dit {

namespace {

float elapsed_ms(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  XS_CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
  return ms;
}

}  // namespace

QkvBenchRow run_qkv_bench(int64_t seq, int ranks, int heads, int rank, const burstgap::ModelParams& params,
                          int warmup, int samples, const std::vector<int>& groups, int count_checks) {
  using namespace ulysses;
  XS_ASSERT(!groups.empty(), "bench qkv: no raster group to time");
  XS_ASSERT(count_checks >= 1, "bench qkv: count checks must be >= 1 (got {})", count_checks);
  for (int g : groups) XS_ASSERT(g >= 0, "bench qkv: raster group {} must be >= 0 (0: the L2 rule)", g);
  const Problem p{ranks, 1, seq, heads, kQkvHeadDim};
  validate_qkv(p);
  XS_ASSERT(rank >= 0 && rank < ranks, "bench qkv: --rank {} is not a rank of P = {}", rank, ranks);
  XS_CHECK_CUDA(cudaSetDevice(0));
  const int64_t L = qkv_rows(p), C = qkv_hidden(p), D = kQkvHeadDim, Hp = p.heads_per_rank();
  cudaStream_t st = nullptr;
  XS_CHECK_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cublasHandle_t blas = nullptr;
  XS_ASSERT(cublasCreate(&blas) == CUBLAS_STATUS_SUCCESS && cublasSetStream(blas, st) == CUBLAS_STATUS_SUCCESS,
            "bench qkv: cannot create a cuBLAS handle");

  // Inputs: h, W random bf16; vectors from the host.
  DeviceBuffer<std::uint16_t> h(size_t(L * C)), w(size_t(3 * C * C));
  attention::fill_random_bf16(h.get(), L * C, 101 + seq, 1.0f, st);
  attention::fill_random_bf16(w.get(), 3 * C * C, 202 + heads, float(1.0 / std::sqrt(double(C))), st);
  std::mt19937 rng(uint32_t(seq * 31 + heads));
  std::normal_distribution<float> nd(0.f, 1.f);
  auto vec = [&](int64_t n, float base, float spread) {
    std::vector<float> v(static_cast<std::size_t>(n));
    for (auto& x : v) x = base + spread * nd(rng);
    return v;
  };
  std::vector<float> cs(size_t(L * D / 2)), sn(cs.size());
  for (size_t i = 0; i < cs.size(); ++i) {
    const float a = 3.1f * nd(rng);
    cs[i] = std::cos(a);
    sn[i] = std::sin(a);
  }
  auto bias = upload(vec(3 * C, 0.f, 0.2f)), qn = upload(vec(D, 1.f, 0.2f)), kn = upload(vec(D, 1.f, 0.2f));
  auto cosd = upload(cs), sind = upload(sn);
  QkvInputs in;
  in.h = h.get();
  in.w = w.get();
  in.bias = bias.get();
  in.q_norm = qn.get();
  in.k_norm = kn.get();
  in.cos = cosd.get();
  in.sin = sind.get();

  // Baseline buffers.
  DeviceBuffer<float> qkv(size_t(L * 3 * C));
  DeviceBuffer<std::uint16_t> q(size_t(L * C)), k(size_t(L * C)), v(size_t(L * C));
  auto baseline = [&] {
    gemm_bf16_f32(blas, h.get(), w.get(), qkv.get(), L, 3 * C, C);
    kernels::qk_norm_rope(q.get(), k.get(), v.get(), qkv.get(), bias.get(), qn.get(), kn.get(), cosd.get(), sind.get(),
                          L, heads, D, st);
  };

  int sms = 0;
  XS_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  DeviceBuffer<uint32_t> flags(2 * kMaxRanks);
  auto* report = hopper::timeout_report_device();
  auto sync = [&](const char* what) {
    const cudaError_t e = cudaStreamSynchronize(st);
    XS_ASSERT(e == cudaSuccess, "bench qkv: {}: {} {}", what, cudaGetErrorString(e), qkv_explain_failure());
  };

  // 1. The kernel in the one-rank layout ([L, H, D], every head local) against the baseline.
  QkvBenchRow row;
  row.seq = seq;
  row.ranks = ranks;
  row.heads = heads;
  row.rank = rank;
  {
    const Problem one{1, 1, L, heads, kQkvHeadDim};
    DeviceBuffer<std::uint16_t> out[3] = {DeviceBuffer<std::uint16_t>(size_t(L * C)),
                                          DeviceBuffer<std::uint16_t>(size_t(L * C)),
                                          DeviceBuffer<std::uint16_t>(size_t(L * C))};
    // The launch's grid and tail split, so the check covers one-head entries where they occur.
    const int one_grid = std::min(sms, qkv_tiles(one));
    const auto one_order = qkv_split_tail(one, qkv_tile_order(one, 0, QkvOrder::natural), one_grid);
    auto order = upload(one_order);
    QkvArgs a = qkv_shape_args(one, 0);
    qkv_bind_inputs(a, in);
    a.order = order.get();
    a.n_entries = static_cast<int>(one_order.size());
    for (int part = 0; part < 3; ++part) {
      a.dst[part][0] = out[part].get();
      XS_CHECK_CUDA(cudaMemsetAsync(out[part].get(), 0xFF, size_t(L * C) * 2, st));  // NaN poison
    }
    XS_CHECK_CUDA(cudaMemsetAsync(flags.get(), 0, flags.size() * 4, st));
    a.done[0] = flags.get();
    a.ready_out[0] = flags.get() + kMaxRanks;
    a.ready_in = flags.get() + kMaxRanks;
    a.timeout_ns = comm::wait_timeout_ns();
    a.report = report;
    a.epoch = 1;
    launch_qkv_fused(a, one_grid, st);
    baseline();
    sync("one-rank check");
    const std::uint16_t* base[3] = {q.get(), k.get(), v.get()};
    for (int part = 0; part < 3; ++part) {
      const auto got = out[part].to_host(size_t(L * C));
      std::vector<std::uint16_t> want(size_t(L * C));
      XS_CHECK_CUDA(cudaMemcpy(want.data(), base[part], want.size() * 2, cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < got.size(); ++i) {
        const double x = attention::bf16_bits_to_float(got[i]), y = attention::bf16_bits_to_float(want[i]);
        const double err = std::abs(x - y);
        if (!within_one_bf16_step(x, y)) ++row.elements_off;
        row.max_abs_diff = std::isfinite(err) ? std::max(row.max_abs_diff, err) : INFINITY;
      }
    }
  }

  // 2. Loopback: rank `rank`'s share and advisor order (one per raster group), every
  //    owner local; each order's counts checked after one launch.
  const int grid = std::min(sms, qkv_tiles(p));
  std::vector<QkvSchedule> scheds;
  std::vector<DeviceBuffer<int>> orders;
  for (int g : groups) {
    scheds.push_back(choose_qkv_schedule(p, rank, grid, params, {}, g));
    orders.push_back(upload(scheds.back().order));
  }
  // The first group's order without the tail split, when the split changed it.
  if (scheds[0].split_tail) {
    scheds.push_back(choose_qkv_schedule(p, rank, grid, params, {}, groups[0], false));
    orders.push_back(upload(scheds.back().order));
  }
  row.order = scheds[0].reason;
  DeviceBuffer<std::uint16_t> scratch[3] = {DeviceBuffer<std::uint16_t>(size_t(seq * Hp * D)),
                                            DeviceBuffer<std::uint16_t>(size_t(seq * Hp * D)),
                                            DeviceBuffer<std::uint16_t>(size_t(seq * Hp * D))};
  QkvArgs a = qkv_shape_args(p, rank);
  qkv_bind_inputs(a, in);
  for (int j = 0; j < ranks; ++j) {
    for (int part = 0; part < 3; ++part) a.dst[part][j] = scratch[part].get();
    a.done[j] = flags.get() + j;
    a.ready_out[j] = flags.get() + kMaxRanks + j;
  }
  a.ready_in = flags.get() + kMaxRanks;
  a.timeout_ns = comm::wait_timeout_ns();
  a.report = report;
  uint32_t epoch = 0;
  const uint32_t want = qkv_signals_per_source(p);
  for (int agent : {1, 0})  // both release modes add the same counts
    for (std::size_t k = 0; k < orders.size(); ++k)
      for (int check = 0; check < count_checks; ++check) {
        XS_CHECK_CUDA(cudaMemsetAsync(flags.get(), 0, flags.size() * 4, st));
        a.order = orders[k].get();
        a.n_entries = static_cast<int>(scheds[k].order.size());
        a.epoch = epoch = 1;
        a.release_by_agent = agent;
        launch_qkv_fused(a, grid, st);
        sync("loopback count check");
        const auto counts = flags.to_host(size_t(ranks));
        for (int j = 0; j < ranks; ++j)
          if (counts[j] != want)
            row.count_errors += fmt::format("{}{} order {} launch {}: owner {} counted {} of {}",
                                            row.count_errors.empty() ? "" : "; ", agent ? "agent" : "consumers", k,
                                            check, j, counts[j], want);
      }

  // 3. Timing, in turns: the baseline, then the fused kernel with each order.
  cudaEvent_t e0, e1;
  XS_CHECK_CUDA(cudaEventCreate(&e0));
  XS_CHECK_CUDA(cudaEventCreate(&e1));
  auto timed = [&](auto&& work) {
    return [&, work](int n) {
      XS_CHECK_CUDA(cudaEventRecord(e0, st));
      for (int i = 0; i < n; ++i) work();
      XS_CHECK_CUDA(cudaEventRecord(e1, st));
      sync("timing");
      return double(elapsed_ms(e0, e1));
    };
  };
  std::vector<std::function<double(int)>> variants = {timed([&] { baseline(); })};
  const uint32_t sleep_cap = row.agent_max_sleep_ns = a.agent_max_sleep_ns;
  auto fused = [&](std::size_t k, int agent, uint32_t cap) {
    const int* op = orders[k].get();
    const int entries = static_cast<int>(scheds[k].order.size());
    return timed([&, op, entries, agent, cap] {
      a.order = op;
      a.n_entries = entries;
      a.epoch = ++epoch;
      a.release_by_agent = agent;
      a.agent_max_sleep_ns = cap;
      launch_qkv_fused(a, grid, st);
    });
  };
  for (std::size_t k = 0; k < orders.size(); ++k) variants.push_back(fused(k, 1, sleep_cap));
  variants.push_back(fused(0, 1, kQkvCompareAgentSleepNs));  // the first order, the agent's other sleep cap
  variants.push_back(fused(0, 0, sleep_cap));                // last: the first order released by the consumers
  const auto ms = sample_interleaved_ms(variants, warmup, samples);
  row.cublas_norm_rope_ms = median_of_sorted(ms[0]);
  for (std::size_t i = 0; i < groups.size(); ++i)
    row.fused_by_group.push_back({scheds[i].group, median_of_sorted(ms[i + 1])});
  row.split_tail = scheds[0].split_tail;
  if (row.split_tail) row.fused_unsplit_ms = median_of_sorted(ms[groups.size() + 1]);
  row.fused_compare_sleep_ms = median_of_sorted(ms[ms.size() - 2]);
  row.fused_by_consumer_ms = median_of_sorted(ms.back());
  row.group = scheds[0].group;
  row.fused_loopback_ms = row.fused_by_group[0].second;
  row.tflops_fused = 2.0 * double(L) * double(3 * C) * double(C) / (row.fused_loopback_ms * 1e9);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cublasDestroy(blas);
  cudaStreamDestroy(st);
  return row;
}

}  // namespace xstage::dit
