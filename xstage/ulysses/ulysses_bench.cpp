// One configuration of `xstage bench ulysses`: every path on the same inputs, timed
// with CUDA events, checked bitwise in the same run; and --kernel-only's share of one
// rank on one GPU.
//
// Timing follows xstage/bench/timing.hpp (CUDA events around back-to-back launches,
// warm-up, median of samples, the paths sampled in turns) with one difference: the
// ranks issue collectives, so every rank must run the same number of launches. The
// batch size of a sample comes from the attention FLOP count (not from a per-rank
// warm-up estimate) and the number of samples is fixed; a host barrier lines the
// ranks up before each sample.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <mutex>

#include "common/check.hpp"
#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "xstage/attention/attention_cuda.hpp"
#include "xstage/bench/event_timer.hpp"
#include "xstage/bench/ulysses_bench.hpp"
#include "xstage/comm/comm.hpp"
#include "xstage/ulysses/ulysses_cuda.hpp"
#include "xstage/ulysses/ulysses_fused.hpp"
#include "share_inputs.hpp"

namespace xstage::ulysses {

namespace {

// Launches per sample: ~2 ms of attention at ~500 TFLOP/s, between 1 and 50.
int launches_per_sample(const Problem& p) {
  const double flops = 4.0 * double(p.seq) * double(p.seq) * p.head_dim * p.heads_per_rank() * p.batch;
  const double est_ms = flops / 5e11;
  return std::clamp(static_cast<int>(std::ceil(2.0 / std::max(est_ms, 1e-3))), 1, 50);
}

// A timed path of the layer and the row field that takes its median.
struct Path {
  double BenchRow::*field;
  std::function<void()> run;
};

// Every path's samples, taken in turns (path 0, 1, ..., then 0, 1, ... again), so that a
// drift of the card's clocks over the row moves them alike (one path after the other
// read up to 10 % apart for the same kernel). Every rank runs the same sequence of
// launches: they hold collectives. Returns this rank's medians in a BenchRow.
BenchRow time_paths(comm::Rank& rank, Layer& layer, int inner, const BenchOptions& o) {
  cudaStream_t st = rank.stream();
  const std::vector<Path> paths = {
      {&BenchRow::pre_a2a_ms, [&] { layer.pre_attention(); }},
      {&BenchRow::attention_ms, [&] { layer.attention_only(); }},
      {&BenchRow::serial_ms, [&] { layer.serial(); }},
      {&BenchRow::coarse_ms, [&] { layer.coarse(); }},
      {&BenchRow::fused_per_cta_ms, [&] { layer.fused(Completion::sender_visible, FusedSignal::per_cta); }},
      {&BenchRow::fused_per_slice_ms, [&] { layer.fused(Completion::sender_visible, FusedSignal::per_slice); }},
      {&BenchRow::fused_by_agent_ms, [&] { layer.fused(Completion::sender_visible, FusedSignal::by_agent); }},
      {&BenchRow::fused_receiver_ms, [&] { layer.fused(Completion::receiver_complete); }},
      {&BenchRow::fused_loopback_ms, [&] { layer.fused_loopback(); }},
      {&BenchRow::attention_fused_order_ms, [&] { layer.attention_fused_order(); }}};
  for (const Path& path : paths)
    for (int w = 0; w < o.warmup; ++w) path.run();
  bench::EventTimer timer(st, "attention kernel", attention::explain_device_failure);
  std::vector<std::vector<double>> samples(paths.size());
  for (int k = 0; k < o.samples; ++k)
    for (std::size_t i = 0; i < paths.size(); ++i) {
      XS_CHECK_CUDA(cudaStreamSynchronize(st));
      rank.host_barrier();
      samples[i].push_back(timer(paths[i].run, inner) / inner);
    }
  BenchRow t;
  for (std::size_t i = 0; i < paths.size(); ++i) {
    std::sort(samples[i].begin(), samples[i].end());
    t.*paths[i].field = median_of_sorted(samples[i]);
  }
  t.fused_sender_ms = default_signal(layer.problem()) == FusedSignal::per_cta ? t.fused_per_cta_ms : t.fused_per_slice_ms;
  return t;
}

// Bitwise checks against the serial path: the fused output is poisoned (0xFFFF, a NaN)
// before each run, on every rank, before any peer writes; both completions, every signal.
std::pair<bool, bool> check_paths(comm::Rank& rank, Layer& layer) {
  cudaStream_t st = rank.stream();
  const std::size_t n_out = layer.out_elems();
  layer.serial();
  XS_CHECK_CUDA(cudaStreamSynchronize(st));
  const auto want = bench::to_host(layer.serial_out(), n_out);
  bool fused_ok = true;
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
    fused_ok = fused_ok && bench::to_host(layer.fused_out(), n_out) == want;
  }
  layer.coarse();
  XS_CHECK_CUDA(cudaStreamSynchronize(st));
  const bool coarse_ok = bench::to_host(layer.coarse_out(), n_out) == want;
  rank.host_barrier();
  return {fused_ok, coarse_ok};
}

// The row from every rank's medians: the slowest rank's, per path.
void summarize(const std::vector<BenchRow>& ranks, const Problem& p, BenchRow& row) {
  for (double BenchRow::*m : {&BenchRow::pre_a2a_ms, &BenchRow::attention_ms, &BenchRow::serial_ms,
                              &BenchRow::coarse_ms, &BenchRow::fused_sender_ms, &BenchRow::fused_receiver_ms,
                              &BenchRow::fused_per_cta_ms, &BenchRow::fused_per_slice_ms, &BenchRow::fused_by_agent_ms,
                              &BenchRow::fused_loopback_ms, &BenchRow::attention_fused_order_ms})
    for (const BenchRow& t : ranks) row.*m = std::max(row.*m, t.*m);
  row.signal = to_string(default_signal(p));
  row.speedup_vs_serial = row.serial_ms / row.fused_sender_ms;
  row.measured_stall_us = (row.fused_sender_ms - row.attention_ms) * 1e3;
  row.nvlink_GBps = rank_remote_bytes(p) / (row.fused_sender_ms * 1e6);
  row.fused_equal = std::all_of(ranks.begin(), ranks.end(), [](const BenchRow& t) { return t.fused_equal; });
  row.coarse_equal = std::all_of(ranks.begin(), ranks.end(), [](const BenchRow& t) { return t.coarse_equal; });
}

}  // namespace

BenchRow run_bench(const BenchConfig& c, const burstgap::ModelParams& params, const BenchOptions& o) {
  const Problem p = c.problem();
  validate(p, comm::visible_gpus());
  XS_ASSERT(o.warmup >= 0 && o.samples >= 1, "bench ulysses: warmup >= 0 and samples >= 1 (got {}, {})", o.warmup,
            o.samples);
  const int inner = launches_per_sample(p);
  BenchRow row;
  row.config = c;
  std::mutex mu;
  std::vector<BenchRow> ranks(p.ranks);
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
    BenchRow t = time_paths(rank, layer, inner, o);
    std::tie(t.fused_equal, t.coarse_equal) = check_paths(rank, layer);
    std::lock_guard lock(mu);
    ranks[r] = t;
    if (r == 0) {
      row.order = layer.schedule().reason;
      row.predicted_stall_us = layer.schedule().predicted_stall_ns * 1e-3;
    }
  });
  summarize(ranks, p, row);
  return row;
}

namespace {

// One rank's share on one GPU: its inputs, a second output and the loopback targets.
struct KernelShare : ShareInputs {
  DeviceBuffer<std::uint16_t> o_ord, loop_out;
  DeviceBuffer<uint32_t> loop_counter;
  attention::FwdArgs a_ord;  // head_major's output in o (ShareInputs::a), the fused order's in o_ord
  explicit KernelShare(const Problem& prob)
      : ShareInputs(prob), o_ord(n_attn), loop_out(n_owner), loop_counter(kMaxRanks) {
    a_ord = a;
    a_ord.o.data = o_ord.get();
  }
  // Every owner's pointer and counter local, with signal mode `s`.
  FusedTargets loopback(int rank, FusedSignal s) const {
    FusedTargets t;
    for (int j = 0; j < p.ranks; ++j) {
      t.out[j] = loop_out.get();
      t.counter[j] = loop_counter.get() + j;
    }
    t.geo = fused_geometry(p, rank);
    t.signal = s;
    return t;
  }
};

// Same tiles, same math: the order must not change a bit (both outputs poisoned first).
bool order_keeps_bits(KernelShare& s, const attention::FwdConfig& cfg, const attention::FwdConfig& fused_cfg) {
  attention::fill_bf16_bits(s.o.get(), s.n_attn, 0xFFFF);
  attention::fill_bf16_bits(s.o_ord.get(), s.n_attn, 0xFFFF);
  attention::flash_fwd_with(s.a, cfg);
  attention::flash_fwd_with(s.a_ord, fused_cfg);
  XS_CHECK_CUDA(cudaDeviceSynchronize());
  const auto head_major = s.o.to_host(s.n_attn);
  return head_major == s.o_ord.to_host(s.n_attn) &&
         std::find(head_major.begin(), head_major.end(), std::uint16_t{0xFFFF}) == head_major.end();
}

// The completion counts the receivers wait for: one launch of each signal mode from
// zeroed counters must leave exactly fused_signals_per_forward at every owner.
void check_signal_counts(KernelShare& s, const attention::FwdConfig& fused_cfg,
                         const std::vector<FusedTargets>& modes, KernelRow& row) {
  row.signal_counts_ok = true;
  for (const FusedTargets& mode : modes) {
    fill_device(s.loop_counter.get(), 0, kMaxRanks * sizeof(uint32_t));
    launch_fused_attention(s.a, fused_cfg, mode, nullptr);
    XS_CHECK_CUDA(cudaDeviceSynchronize());
    const auto got = s.loop_counter.to_host(kMaxRanks);
    const uint32_t want = fused_signals_per_forward(s.p, mode.signal, fused_cfg.grid, fused_cfg.consumer_wgs);
    uint32_t lo = got[0], hi = got[0];
    for (int j = 0; j < s.p.ranks; ++j) {
      lo = std::min(lo, got[j]);
      hi = std::max(hi, got[j]);
      row.signal_counts_ok = row.signal_counts_ok && got[j] == want;
    }
    row.signal_counts += fmt::format("{}{} {}{}/{}", row.signal_counts.empty() ? "" : ", ", to_string(mode.signal), lo,
                                     lo == hi ? "" : fmt::format("..{}", hi), want);
  }
}

}  // namespace

KernelRow run_kernel_bench(const BenchConfig& c, int rank, const burstgap::ModelParams& params, int warmup, int reps) {
  const Problem p = c.problem();
  validate(p);
  XS_ASSERT(rank >= 0 && rank < p.ranks, "bench ulysses --kernel-only: rank {} is outside 0 .. {}", rank, p.ranks - 1);
  XS_CHECK_CUDA(cudaSetDevice(0));
  KernelShare s(p);
  int sms = 0;
  XS_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const attention::FwdConfig cfg = attention::choose_config(attention::validate(s.a), sms);
  const FusedSchedule sched = choose_schedule(p, rank, cfg.grid, params);
  attention::FwdConfig fused_cfg = cfg;
  fused_cfg.tiles = sched.tiles;
  const std::vector<FusedTargets> modes = {s.loopback(rank, FusedSignal::per_cta),
                                           s.loopback(rank, FusedSignal::per_slice),
                                           s.loopback(rank, FusedSignal::by_agent)};
  // The six variants timed in turns, so a drift of the card's clocks does not favour one.
  const std::vector<std::function<void()>> launches = {
      [&] { attention::flash_fwd_with(s.a, cfg); },
      [&] { attention::flash_fwd_with(s.a_ord, fused_cfg); },
      [&] { launch_fused_attention(s.a, fused_cfg, modes[0], nullptr); },
      [&] { launch_fused_attention(s.a, fused_cfg, modes[1], nullptr); },
      [&] { launch_fused_attention(s.a, cfg, modes[0], nullptr); },
      [&] { launch_fused_attention(s.a, fused_cfg, modes[2], nullptr); }};
  bench::EventTimer timer(nullptr, "attention kernel", attention::explain_device_failure);
  const std::vector<double> ms = bench::launch_medians_in_turns(timer, launches, warmup, reps);

  KernelRow row;
  row.config = c;
  row.rank = rank;
  row.order = sched.reason;
  row.attention_ms = ms[0];
  row.attention_fused_order_ms = ms[1];
  row.loopback_per_cta_ms = ms[2];
  row.loopback_per_slice_ms = ms[3];
  row.loopback_head_major_ms = ms[4];
  row.loopback_by_agent_ms = ms[5];
  row.fused_order_equal = order_keeps_bits(s, cfg, fused_cfg);
  check_signal_counts(s, fused_cfg, modes, row);
  return row;
}

}  // namespace xstage::ulysses
