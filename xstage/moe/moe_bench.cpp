// One configuration of `xstage bench moe`: both fused schedules and the unfused
// path on the same inputs, timed with CUDA events (bench/event_timer.hpp), checked
// in the same run against the unfused path's output. The two schedules are sampled
// in turns and reported as the median of their samples; the unfused path as the
// mean of its forwards. Every figure is the slowest rank's.
#include <algorithm>
#include <array>
#include <functional>
#include <string>
#include <cmath>
#include <mutex>

#include "common/check.hpp"
#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "xstage/bench/event_timer.hpp"
#include "xstage/bench/moe_bench.hpp"
#include "xstage/comm/comm.hpp"
#include "bench_inputs.hpp"
#include "xstage/moe/sm90_moe_fused.hpp"
#include "xstage/moe/unfused.hpp"

namespace xstage::moe {

namespace {

// What one rank measured; the row takes the slowest rank's figures.
struct RankFigures {
  double expert_wave_us = 0, interleaved_us = 0, unfused_us = 0, gemm_us = 0, max_rel_err = 0, remote_bytes = 0;
  double cublas_us = 0, cublas_exact_us = 0;
  std::string cublas_form;
  double from_logits_us = 0, planner_us = 0;
  bool bitwise = true;
  std::array<double, 6> phases{};
  KernelProfile profile;  // with BenchOptions::profile: the Interleaved order's, profiled
};

// How the timed launches are sampled: `rounds` samples of `per` back-to-back launches.
struct Sampling {
  int warmup, rounds, per;
  Sampling(int warmup, int iters) : warmup(warmup), rounds(std::min(iters, 5)), per((iters + rounds - 1) / rounds) {}
};

// The unfused reference path: its mean time over `iters` forwards (after picking the
// faster cuBLAS form, the baseline) and its output, the reference of the checks.
std::vector<std::uint16_t> time_unfused(UnfusedMoe& unfused, const Problem& p, const RankInputs& in, int warmup,
                                        int iters, RankFigures& f) {
  for (int i = 0; i < warmup; ++i) unfused.forward();
  unfused.choose_gemm_path(3);
  for (int i = 0; i < iters; ++i) {
    const auto t = unfused.forward();
    f.unfused_us += t.total_us / iters;
    f.gemm_us += t.gemm_us / iters;
  }
  return bench::to_host(unfused.out(), in.out_elems(p));
}

// The two expert GEMMs alone in each cuBLAS form these shapes allow, sampled in turns;
// the fastest form's median is the roofline (after a forward, so H holds real values).
// The fastest of the forms on the experts' own row counts (all but `batched`, which gives
// every expert the mean count) is the roofline of the same problem.
void time_cublas(comm::Rank& rank, UnfusedMoe& unfused, int warmup, int iters, RankFigures& f) {
  const auto forms = unfused.gemm_forms();
  std::vector<std::function<void()>> launches;
  for (auto form : forms) launches.push_back([&unfused, form] { unfused.expert_gemms(form); });
  bench::EventTimer timer(rank.stream(), "cuBLAS expert GEMMs");
  const std::vector<double> ms = bench::launch_medians_in_turns(timer, launches, warmup, std::max(iters, 3));
  const auto best = std::min_element(ms.begin(), ms.end()) - ms.begin();
  f.cublas_us = ms[best] * 1e3;
  f.cublas_form = UnfusedMoe::name(forms[best]);
  for (std::size_t i = 0; i < forms.size(); ++i)
    if (forms[i] != UnfusedMoe::GemmForm::batched && (f.cublas_exact_us == 0 || ms[i] * 1e3 < f.cublas_exact_us))
      f.cublas_exact_us = ms[i] * 1e3;
}

// Expert-Wave and the advisor's Interleaved schedule, sampled in turns (EW, IL, EW, ...)
// so a drift of the card's clocks over the row moves both alike. Each sample follows an
// untimed lead-in launch, so none holds the host's first launch onto an idle GPU. The
// fused outputs of the last round are checked against `want`. Returns IL's config.
ScheduleConfig time_schedules(comm::Rank& rank, FusedMoe& fused, const Problem& p, const Layout& layout,
                              const Routing& routing, const RankInputs& in, const burstgap::ModelParams& params,
                              const std::vector<std::uint16_t>& want, const Sampling& s, RankFigures& f) {
  const int r = rank.rank();
  const TileLists tiles = build_tiles(p, layout.ranks[r]);
  std::vector<std::vector<WorkItem>> orders;
  ScheduleConfig chosen;
  for (ScheduleKind kind : {ScheduleKind::expert_wave, ScheduleKind::interleaved}) {
    chosen = choose_schedule(kind, p, tiles, fused.blocks(), params);
    orders.push_back(make_scheduler(chosen)->order(tiles));
  }
  bench::EventTimer timer(rank.stream(), "fused MoE kernel");
  std::vector<std::vector<double>> samples(orders.size());
  for (int round = -1; round < s.rounds; ++round)  // round -1: warm-up
    for (std::size_t k = 0; k < orders.size(); ++k) {
      fused.set_inputs(in.x.get(), routing, layout, orders[k]);  // waits for the previous launches
      if (round < 0) {
        for (int i = 0; i < s.warmup; ++i) fused.launch();
        continue;
      }
      fused.synchronize();
      rank.host_barrier();
      fused.launch();
      const double ms = timer.timed([&] { fused.launch(); }, s.per, [&] { fused.synchronize(); });
      samples[k].push_back(ms * 1e3 / s.per);
      if (round == s.rounds - 1)
        f.max_rel_err = std::max(f.max_rel_err, max_rel_diff(bench::to_host(fused.out(), in.out_elems(p)), want));
    }
  for (auto& v : samples) std::sort(v.begin(), v.end());
  f.expert_wave_us = median_of_sorted(samples[0]);
  f.interleaved_us = median_of_sorted(samples[1]);
  return chosen;
}

// The kernel's own account of where the time goes (its CycleProfile instantiation): the
// Interleaved order in `per` profiled launches after all the timing, a lead-in first.
void profile_schedule(comm::Rank& rank, FusedMoe& fused, const Problem& p, const Layout& layout,
                      const Routing& routing, const RankInputs& in, const ScheduleConfig& cfg, int per,
                      RankFigures& f) {
  fused.synchronize();
  fused.set_inputs(in.x.get(), routing, layout, make_scheduler(cfg)->order(build_tiles(p, layout.ranks[rank.rank()])));
  rank.host_barrier();
  fused.launch();
  fused.set_profile(true);
  for (int i = 0; i < per; ++i) fused.launch();
  f.profile = fused.profile();
  fused.set_profile(false);
}

// Router logits whose top-k is this rank's routing in slot order (the weights then
// follow from the logits, not from the synthetic routing).
std::vector<float> logits_for(const Problem& p, const Routing& routing) {
  const int T = p.tokens_per_rank, K = p.topk, E = p.experts;
  std::vector<float> lg(std::size_t(T) * E, -8.0f);
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < K; ++j) lg[std::size_t(t) * E + routing.expert[std::size_t(t) * K + j]] = 4.0f - 0.25f * j;
  return lg;
}

// The forward from logits (planner + kernel) and its planner part, medians of the
// rounds. A lead-in forward keeps the GPU busy while the timed ones are enqueued, so
// the events time the GPU's work, not the host's launches (the planner is six short
// kernels). Events around each planner call split the two.
void time_from_logits(comm::Rank& rank, FusedMoe& dev, const float* logits, const RankInputs& in,
                      const ScheduleConfig& cfg, const Sampling& s, RankFigures& f) {
  cudaStream_t st = rank.stream();
  std::vector<cudaEvent_t> ev(2 * s.per + 2);
  for (auto& e : ev) XS_CHECK_CUDA(cudaEventCreate(&e));
  auto forward = [&] {
    dev.route_on_device(in.x.get(), logits, cfg);
    dev.launch();
  };
  std::vector<double> total, plan;
  for (int round = -1; round < s.rounds; ++round) {
    dev.synchronize();
    rank.host_barrier();
    forward();
    if (round < 0) {
      for (int i = 0; i < std::max(1, s.warmup); ++i) forward();
      continue;
    }
    XS_CHECK_CUDA(cudaEventRecord(ev[0], st));
    for (int i = 0; i < s.per; ++i) {
      XS_CHECK_CUDA(cudaEventRecord(ev[2 + 2 * i], st));
      dev.route_on_device(in.x.get(), logits, cfg);
      XS_CHECK_CUDA(cudaEventRecord(ev[3 + 2 * i], st));
      dev.launch();
    }
    XS_CHECK_CUDA(cudaEventRecord(ev[1], st));
    dev.synchronize();  // names a timed-out wait or non-finite logits
    float ms = 0, sum = 0;
    XS_CHECK_CUDA(cudaEventElapsedTime(&ms, ev[0], ev[1]));
    for (int i = 0; i < s.per; ++i) {
      float m = 0;
      XS_CHECK_CUDA(cudaEventElapsedTime(&m, ev[2 + 2 * i], ev[3 + 2 * i]));
      sum += m;
    }
    total.push_back(ms * 1e3 / s.per);
    plan.push_back(sum * 1e3 / s.per);
  }
  for (auto& e : ev) cudaEventDestroy(e);
  std::sort(total.begin(), total.end());
  std::sort(plan.begin(), plan.end());
  f.from_logits_us = median_of_sorted(total);
  f.planner_us = median_of_sorted(plan);
}

// The planner's phases, in profiled forwards after the timing (their events are not in
// the timed ones); a lead-in first, not profiled.
void profile_planner(FusedMoe& dev, const float* logits, const RankInputs& in, const ScheduleConfig& cfg, int calls,
                     RankFigures& f) {
  dev.synchronize();
  dev.route_on_device(in.x.get(), logits, cfg);
  dev.launch();
  dev.profile_planner(true);
  for (int i = 0; i < calls; ++i) {
    dev.route_on_device(in.x.get(), logits, cfg);
    dev.launch();
  }
  dev.synchronize();
  const FusedMoe::PlannerPhases ph = dev.planner_phases();
  dev.profile_planner(false);
  const double n = std::max(1, ph.calls);
  f.phases = {ph.topk_us / n, ph.gather_us / n, ph.count_us / n, ph.scan_us / n, ph.order_us / n, ph.assign_us / n};
}

// Shared by the rank threads: every rank's device routing, for the host-routed check.
struct Gathered {
  std::mutex mu;
  std::vector<Routing> routing;
  ScheduleConfig config;  // rank 0's
};

// With device routing: the forward from logits timed, its planner profiled, and its
// output checked bitwise against the host-routed forward of the routing it chose.
void run_from_logits(comm::Rank& rank, FusedMoe& fused, const Problem& p, const Routing& routing, const RankInputs& in,
                     const burstgap::ModelParams& params, const Sampling& s, Gathered& g, RankFigures& f) {
  const int r = rank.rank();
  const std::vector<float> lg = logits_for(p, routing);
  DeviceBuffer<float> logits(lg.size());
  copy_to_device(logits.get(), lg.data(), lg.size() * 4);
  FusedMoe dev(rank, p, route::max_recv_rows(p));
  dev.set_weights(in.w1.get(), in.w2.get());
  const ScheduleConfig cfg = choose_schedule(ScheduleKind::interleaved, p, expected_tiles(p), dev.blocks(), params);
  time_from_logits(rank, dev, logits.get(), in, cfg, s, f);
  profile_planner(dev, logits.get(), in, cfg, std::max(s.per, 3), f);
  const auto dev_out = bench::to_host(dev.out(), in.out_elems(p));
  const Routing mine = dev.device_routing();
  {
    std::lock_guard lock(g.mu);
    g.routing[r] = mine;
    if (r == 0) g.config = cfg;
  }
  rank.host_barrier();
  const Layout L = build_layout(p, g.routing);
  fused.set_inputs(in.x.get(), mine, L, make_scheduler(cfg)->order(build_tiles(p, L.ranks[r])));
  fused.launch();
  fused.synchronize();
  f.bitwise = bench::to_host(fused.out(), in.out_elems(p)) == dev_out;
}

// Bytes this rank stores to other ranks: dispatch rows out, expert rows back.
double remote_bytes(const Problem& p, const Layout& layout, int r) {
  long long rows_out = 0, rows_back = 0;
  for (int i = 0; i < p.tokens_per_rank * p.topk; ++i) rows_out += layout.ranks[r].send_rank[i] != r;
  for (int row = 0; row < layout.ranks[r].rows(); ++row) rows_back += layout.ranks[r].recv_src_rank[row] != r;
  return double(rows_out + rows_back) * p.hidden * 2;
}

// The row from every rank's figures: the slowest rank sets the layer's time.
void summarize(const std::vector<RankFigures>& ranks, const Problem& p, bool device_routing, BenchRow& row) {
  auto slowest = [&](double RankFigures::*m) {
    double v = 0;
    for (const auto& f : ranks) v = std::max(v, f.*m);
    return v;
  };
  row.expert_wave_us = slowest(&RankFigures::expert_wave_us);
  row.interleaved_us = slowest(&RankFigures::interleaved_us);
  row.unfused_us = slowest(&RankFigures::unfused_us);
  row.grouped_gemm_us = slowest(&RankFigures::gemm_us);
  row.cublas_us = slowest(&RankFigures::cublas_us);
  row.cublas_exact_us = slowest(&RankFigures::cublas_exact_us);
  row.max_rel_err = slowest(&RankFigures::max_rel_err);
  row.device_routing = device_routing;
  row.from_logits_us = slowest(&RankFigures::from_logits_us);
  row.planner_us = slowest(&RankFigures::planner_us);
  row.from_logits_bitwise = device_routing && std::all_of(ranks.begin(), ranks.end(), [](const auto& f) { return f.bitwise; });
  for (int k = 0; k < 6; ++k)
    for (const auto& f : ranks) row.planner_phase_us[k] = std::max(row.planner_phase_us[k], f.phases[k]);
  row.profiled = std::any_of(ranks.begin(), ranks.end(), [](const auto& f) { return f.profile.launches > 0; });
  if (row.profiled) row.profile = ranks[0].profile;  // rank 0's (at EP = 1 the only one)
  row.correct = row.max_rel_err <= kMaxRelErr && (!device_routing || row.from_logits_bitwise);
  row.speedup = row.expert_wave_us / row.interleaved_us;
  const double flops = 2.0 * p.tokens_per_rank * p.topk * 3.0 * p.hidden * p.intermediate;  // per GPU, average
  const double best = std::min(row.expert_wave_us, row.interleaved_us);
  row.tflops = flops / (best * 1e6);
  row.gemm_tflops = flops / (row.grouped_gemm_us * 1e6);
  row.cublas_tflops = flops / (row.cublas_us * 1e6);
  row.fused_over_cublas = row.cublas_us / best;
  row.fused_over_cublas_exact = row.cublas_exact_us / best;
  row.fused_over_unfused = row.unfused_us / best;
  row.nvlink_GBps = slowest(&RankFigures::remote_bytes) / (best * 1e3);
}

}  // namespace

BenchRow run_bench(const BenchConfig& c, const burstgap::ModelParams& params, const BenchOptions& o) {
  const Problem p = c.problem();
  validate(p, comm::visible_gpus());
  XS_ASSERT(o.warmup >= 0 && o.iters >= 1, "bench moe: warmup >= 0 and iters >= 1 (got {}, {})", o.warmup, o.iters);
  const auto routing = synthetic_routing(p, c.synthetic());
  const Layout layout = build_layout(p, routing);
  const Sampling s(o.warmup, o.iters);

  BenchRow row;
  row.config = c;
  std::vector<RankFigures> figures(p.ranks);
  Gathered gathered;
  gathered.routing.resize(p.ranks);
  comm::run_ranks(p.ranks, comm::Launch::threads, [&](comm::Rank& rank) {
    const int r = rank.rank();
    RankFigures f;
    const RankInputs in(p, routing[r], r, rank.stream());
    UnfusedMoe unfused(rank, p, layout, in.w1.get(), in.w2.get(), in.x.get(), in.wt.get());
    const auto want = time_unfused(unfused, p, in, o.warmup, o.iters, f);
    time_cublas(rank, unfused, o.warmup, o.iters, f);
    FusedMoe fused(rank, p, layout.max_rows());
    fused.set_weights(in.w1.get(), in.w2.get());
    if (o.blocks > 0) fused.set_blocks(o.blocks);
    const ScheduleConfig chosen = time_schedules(rank, fused, p, layout, routing[r], in, params, want, s, f);
    if (o.profile) profile_schedule(rank, fused, p, layout, routing[r], in, chosen, s.per, f);
    if (o.device_routing) run_from_logits(rank, fused, p, routing[r], in, params, s, gathered, f);
    f.remote_bytes = remote_bytes(p, layout, r);
    std::lock_guard lock(gathered.mu);
    figures[r] = f;
    if (r == 0) {
      row.interleaved = chosen;
      row.unfused_gemm = unfused.gemm_path();
      row.cublas_form = f.cublas_form;
    }
  });
  summarize(figures, p, o.device_routing, row);
  row.predicted_order_speedup = order_times(p, build_tiles(p, layout.ranks[0]), row.interleaved).speedup();
  row.from_logits_config = gathered.config;
  return row;
}

}  // namespace xstage::moe
