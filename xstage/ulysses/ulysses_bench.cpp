// One configuration of `xstage bench ulysses`: every path on the same inputs,
// timed with CUDA events, checked bitwise in the same run.
//
// Timing follows xstage/bench_timing.hpp (CUDA events around back-to-back
// launches, warm-up, median of samples, the paths sampled in turns) with one
// difference: the ranks issue collectives, so every rank must run the same number
// of launches. The batch size of a sample comes from the attention FLOP count (not
// from a per-rank warm-up estimate) and the number of samples is fixed; a host
// barrier lines the ranks up before each sample.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <mutex>

#include "common/check.hpp"
#include "xstage/attention_cuda.hpp"
#include "xstage/attention_timing.hpp"
#include "xstage/bench_timing.hpp"
#include "xstage/check_cuda.hpp"
#include "xstage/comm.hpp"
#include "xstage/device_buffer.hpp"
#include "xstage/ulysses_bench.hpp"
#include "xstage/ulysses_cuda.hpp"
#include "ulysses_fused.hpp"

namespace xstage::ulysses {

namespace {

std::vector<std::uint16_t> to_host(const std::uint16_t* d, std::size_t n) {
  std::vector<std::uint16_t> h(n);
  XS_CHECK_CUDA(cudaMemcpy(h.data(), d, n * 2, cudaMemcpyDeviceToHost));
  return h;
}

std::vector<uint32_t> to_host(const uint32_t* d, std::size_t n) {
  std::vector<uint32_t> h(n);
  XS_CHECK_CUDA(cudaMemcpy(h.data(), d, n * sizeof(uint32_t), cudaMemcpyDeviceToHost));
  return h;
}

bool same(const std::vector<std::uint16_t>& a, const std::vector<std::uint16_t>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 2) == 0;
}

}  // namespace

BenchRow run_bench(const BenchConfig& c, const burstgap::ModelParams& params, const BenchOptions& o) {
  const Problem p = c.problem();
  validate(p, comm::visible_gpus());
  XS_ASSERT(o.warmup >= 0 && o.samples >= 1, "bench ulysses: warmup >= 0 and samples >= 1 (got {}, {})", o.warmup,
            o.samples);
  const double flops = 4.0 * double(p.seq) * double(p.seq) * p.head_dim * p.heads_per_rank() * p.batch;
  const double est_ms = flops / 5e11;  // ~500 TFLOP/s
  const int inner = std::clamp(static_cast<int>(std::ceil(2.0 / std::max(est_ms, 1e-3))), 1, 50);

  BenchRow row;
  row.config = c;
  std::mutex mu;
  std::vector<std::array<double, 11>> ms(p.ranks);
  std::vector<int> fused_ok(p.ranks, 0), coarse_ok(p.ranks, 0);
  double stall_ns = 0;
  comm::run_ranks(p.ranks, comm::Launch::threads, [&](comm::Rank& rank) {
    const int r = rank.rank();
    cudaStream_t st = rank.stream();
    const std::size_t n_in = p.batch * p.rows_per_rank() * p.heads * p.head_dim;
    DeviceBuffer<std::uint16_t> q(n_in), k(n_in), v(n_in);
    attention::fill_random_bf16(q.get(), n_in, 100 + r, 1.0f, st);
    attention::fill_random_bf16(k.get(), n_in, 200 + r, 1.0f, st);
    attention::fill_random_bf16(v.get(), n_in, 300 + r, 1.0f, st);
    Layer layer(rank, p, params);
    layer.set_inputs(q.get(), k.get(), v.get());
    layer.pre_attention();
    XS_CHECK_CUDA(cudaStreamSynchronize(st));

    attention::EventTimer timer;
    // Every path's samples are taken in turns (path 0, 1, ..., then 0, 1, ... again), so
    // that a drift of the card's clocks over the row moves them alike (on one H200,
    // 2026-12-01, one path after the other read up to 10 % apart for the same kernel).
    // Every rank runs the same sequence of launches: they hold collectives.
    auto sample_ms = [&](const std::function<void()>& fn) {
      XS_CHECK_CUDA(cudaStreamSynchronize(st));
      rank.host_barrier();
      return timer(fn, inner, st) / inner;
    };
    // Indexed as t below: 0 pre-A2A, 1 attention, 2 serial, 3 coarse, 4 fused sender-visible
    // (the default signal's, derived), 5 receiver-complete, 6 per-slice, 7 loopback,
    // 8 attention in the fused order, 9 per-CTA, 10 by the agent.
    const std::vector<std::pair<int, std::function<void()>>> paths = {
        {0, [&] { layer.pre_attention(); }},
        {1, [&] { layer.attention_only(); }},
        {2, [&] { layer.serial(); }},
        {3, [&] { layer.coarse(); }},
        {9, [&] { layer.fused(Completion::sender_visible, FusedSignal::per_cta); }},
        {6, [&] { layer.fused(Completion::sender_visible, FusedSignal::per_slice); }},
        {10, [&] { layer.fused(Completion::sender_visible, FusedSignal::by_agent); }},
        {5, [&] { layer.fused(Completion::receiver_complete); }},
        {7, [&] { layer.fused_loopback(); }},
        {8, [&] { layer.attention_fused_order(); }}};
    for (const auto& [i, fn] : paths)
      for (int w = 0; w < o.warmup; ++w) fn();
    std::array<std::vector<double>, 11> samples;
    for (int k = 0; k < o.samples; ++k)
      for (const auto& [i, fn] : paths) samples[i].push_back(sample_ms(fn));
    std::array<double, 11> t{};
    for (const auto& [i, fn] : paths) {
      std::sort(samples[i].begin(), samples[i].end());
      t[i] = median_of_sorted(samples[i]);
    }
    // Sender-visible in the layer's default signal mode (default_signal) is fused_sender_ms.
    t[4] = default_signal(p) == FusedSignal::per_cta ? t[9] : t[6];

    // Bitwise checks: serial is the reference; the fused output is poisoned
    // (0xFFFF, a NaN) before each run, on every rank, before any peer writes.
    const std::size_t n_out = layer.out_elems();
    layer.serial();
    XS_CHECK_CUDA(cudaStreamSynchronize(st));
    const auto want = to_host(layer.serial_out(), n_out);
    bool ok = true;
    const std::pair<Completion, FusedSignal> checks[] = {{Completion::sender_visible, FusedSignal::automatic},
                                                         {Completion::receiver_complete, FusedSignal::automatic},
                                                         {Completion::receiver_complete, FusedSignal::per_cta},
                                                         {Completion::receiver_complete, FusedSignal::per_slice},
                                                         {Completion::receiver_complete, FusedSignal::by_agent}};
    for (const auto& [cmp, sig] : checks) {
      XS_CHECK_CUDA(cudaMemsetAsync(const_cast<std::uint16_t*>(layer.fused_out()), 0xFF, n_out * 2, st));
      XS_CHECK_CUDA(cudaStreamSynchronize(st));
      rank.host_barrier();
      layer.fused(cmp, sig);
      XS_CHECK_CUDA(cudaStreamSynchronize(st));
      rank.host_barrier();  // sender-visible: the peers' kernels have ended too
      ok = ok && same(to_host(layer.fused_out(), n_out), want);
    }
    layer.coarse();
    XS_CHECK_CUDA(cudaStreamSynchronize(st));
    const bool coarse_same = same(to_host(layer.coarse_out(), n_out), want);
    rank.host_barrier();
    std::lock_guard lock(mu);
    ms[r] = t;
    fused_ok[r] = ok;
    coarse_ok[r] = coarse_same;
    if (r == 0) {
      row.order = layer.schedule().reason;
      stall_ns = layer.schedule().predicted_stall_ns;
    }
  });
  auto slowest = [&](int i) {
    double m = 0;
    for (const auto& t : ms) m = std::max(m, t[i]);
    return m;
  };
  row.pre_a2a_ms = slowest(0);
  row.attention_ms = slowest(1);
  row.serial_ms = slowest(2);
  row.coarse_ms = slowest(3);
  row.fused_sender_ms = slowest(4);
  row.fused_receiver_ms = slowest(5);
  row.fused_per_slice_ms = slowest(6);
  row.fused_loopback_ms = slowest(7);
  row.attention_fused_order_ms = slowest(8);
  row.fused_per_cta_ms = slowest(9);
  row.fused_by_agent_ms = slowest(10);
  row.signal = to_string(default_signal(p));
  row.speedup_vs_serial = row.serial_ms / row.fused_sender_ms;
  row.predicted_stall_us = stall_ns * 1e-3;
  row.measured_stall_us = (row.fused_sender_ms - row.attention_ms) * 1e3;
  const double remote_bytes =
      double(p.ranks - 1) / p.ranks * double(p.batch * p.seq * p.heads_per_rank() * p.head_dim * 2);
  row.nvlink_GBps = remote_bytes / (row.fused_sender_ms * 1e6);
  row.fused_equal = std::all_of(fused_ok.begin(), fused_ok.end(), [](int x) { return x != 0; });
  row.coarse_equal = std::all_of(coarse_ok.begin(), coarse_ok.end(), [](int x) { return x != 0; });
  return row;
}

KernelRow run_kernel_bench(const BenchConfig& c, int rank, const burstgap::ModelParams& params, int warmup, int reps) {
  const Problem p = c.problem();
  validate(p);
  XS_ASSERT(rank >= 0 && rank < p.ranks, "bench ulysses --kernel-only: rank {} is outside 0 .. {}", rank, p.ranks - 1);
  XS_CHECK_CUDA(cudaSetDevice(0));
  const int64_t S = p.seq, Hp = p.heads_per_rank(), D = p.head_dim;
  const std::size_t n_attn = p.batch * S * Hp * D, n_out = p.batch * p.rows_per_rank() * p.heads * D;
  DeviceBuffer<std::uint16_t> q(n_attn), k(n_attn), v(n_attn), o(n_attn), o_ord(n_attn), loop_out(n_out);
  DeviceBuffer<uint32_t> loop_counter(kMaxRanks);
  attention::fill_random_bf16(q.get(), n_attn, 41, 1.0f);
  attention::fill_random_bf16(k.get(), n_attn, 42, 1.0f);
  attention::fill_random_bf16(v.get(), n_attn, 43, 1.0f);
  attention::FwdArgs a;
  a.q = attention::Tensor4::bshd(q.get(), p.batch, S, Hp, D);
  a.k = attention::Tensor4::bshd(k.get(), p.batch, S, Hp, D);
  a.v = attention::Tensor4::bshd(v.get(), p.batch, S, Hp, D);
  a.o = attention::Tensor4::bshd(o.get(), p.batch, S, Hp, D);
  int sms = 0;
  XS_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const attention::FwdConfig cfg = attention::choose_config(attention::validate(a), sms);
  const FusedSchedule sched = choose_schedule(p, rank, cfg.grid, params);
  attention::FwdConfig fused_cfg = cfg;
  fused_cfg.tiles = sched.tiles;
  FusedTargets t;
  for (int j = 0; j < p.ranks; ++j) {
    t.out[j] = loop_out.get();
    t.counter[j] = loop_counter.get() + j;
  }
  t.geo = fused_geometry(p, rank);
  attention::FwdArgs a_ord = a;
  a_ord.o.data = o_ord.get();

  KernelRow row;
  row.config = c;
  row.rank = rank;
  row.order = sched.reason;
  // The six variants timed in turns (bench_timing.hpp: sample_interleaved_ms), so a
  // drift of the card's clocks over the run does not favour one of them.
  FusedTargets cta = t, slice = t, agent = t;
  cta.signal = FusedSignal::per_cta;
  slice.signal = FusedSignal::per_slice;
  agent.signal = FusedSignal::by_agent;
  const std::vector<std::function<void()>> launches = {
      [&] { attention::flash_fwd_with(a, cfg); },
      [&] { attention::flash_fwd_with(a_ord, fused_cfg); },
      [&] { launch_fused_attention(a, fused_cfg, cta, nullptr); },
      [&] { launch_fused_attention(a, fused_cfg, slice, nullptr); },
      [&] { launch_fused_attention(a, cfg, cta, nullptr); },
      [&] { launch_fused_attention(a, fused_cfg, agent, nullptr); }};
  attention::EventTimer timer;
  std::vector<std::function<double(int)>> timed;
  for (const auto& launch : launches) timed.push_back([&timer, &launch](int n) { return timer(launch, n); });
  const auto ms = sample_interleaved_ms(timed, warmup, reps);
  row.attention_ms = median_of_sorted(ms[0]);
  row.attention_fused_order_ms = median_of_sorted(ms[1]);
  row.loopback_per_cta_ms = median_of_sorted(ms[2]);
  row.loopback_per_slice_ms = median_of_sorted(ms[3]);
  row.loopback_head_major_ms = median_of_sorted(ms[4]);
  row.loopback_by_agent_ms = median_of_sorted(ms[5]);
  // Same tiles, same math: the order must not change a bit (both outputs poisoned first).
  attention::fill_bf16_bits(o.get(), n_attn, 0xFFFF);
  attention::fill_bf16_bits(o_ord.get(), n_attn, 0xFFFF);
  attention::flash_fwd_with(a, cfg);
  attention::flash_fwd_with(a_ord, fused_cfg);
  XS_CHECK_CUDA(cudaDeviceSynchronize());
  const auto head_major = to_host(o.get(), n_attn);
  row.fused_order_equal = same(head_major, to_host(o_ord.get(), n_attn)) &&
                          std::find(head_major.begin(), head_major.end(), std::uint16_t{0xFFFF}) == head_major.end();
  // The completion counts the receivers wait for: one launch of each signal mode from
  // zeroed counters must leave exactly fused_signals_per_forward at every owner.
  row.signal_counts_ok = true;
  for (const FusedTargets* mode : {&cta, &slice, &agent}) {
    fill_device(loop_counter.get(), 0, kMaxRanks * sizeof(uint32_t));
    launch_fused_attention(a, fused_cfg, *mode, nullptr);
    XS_CHECK_CUDA(cudaDeviceSynchronize());
    const auto got = to_host(loop_counter.get(), kMaxRanks);
    const uint32_t want = fused_signals_per_forward(p, mode->signal, fused_cfg.grid, fused_cfg.consumer_wgs);
    uint32_t lo = got[0], hi = got[0];
    for (int j = 0; j < p.ranks; ++j) {
      lo = std::min(lo, got[j]);
      hi = std::max(hi, got[j]);
      row.signal_counts_ok = row.signal_counts_ok && got[j] == want;
    }
    row.signal_counts += fmt::format("{}{} {}{}/{}", row.signal_counts.empty() ? "" : ", ",
                                     to_string(mode->signal), lo,
                                     lo == hi ? "" : fmt::format("..{}", hi), want);
  }
  return row;
}

}  // namespace xstage::ulysses
