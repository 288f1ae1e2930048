// The Euler sampler over P GPUs: one thread per rank (comm::run_ranks), each
// with its RankModel and, for P > 1, its Ulysses layer; then the per-step timing.
//
// Timing: every rank runs the same fixed number of steps (warm-up, then
// `samples` steps each between two CUDA events on its stream), because a step
// holds collectives: a rank that ran one step more than another would wait for
// ever. (The adaptive policy of bench/timing.hpp decides the count from each
// rank's own measurements, so it is not used here; its median is.) The figure is
// the median step of the slowest rank. Timed steps use dt = 0: the same work,
// and the sampled latent stays as it was. With an MoE FFN and host routing a step
// also holds one host round trip per block (router logits -> routing on the host,
// see dit_moe_ffn.hpp); the stream idles meanwhile, and the events count that time.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>

#include "common/check.hpp"
#include "xstage/bench/event_timer.hpp"
#include "xstage/burstgap/burstgap.hpp"
#include "common/cuda_check.hpp"
#include "xstage/comm/comm.hpp"
#include "xstage/dit/dit_cuda.hpp"
#include "xstage/ulysses/ulysses_cuda.hpp"

namespace xstage::dit {

namespace {
double median_step_ms(RankModel& m, cudaStream_t s, AttnPath path, int warmup, int samples) {
  for (int i = 0; i < warmup; ++i) m.forward(1.0f, path), m.euler(0.0f);
  m.reset_moe_host_times();  // the MoE round trips of the timed steps only
  bench::EventTimer timer(s);
  std::vector<double> ms;
  for (int i = 0; i < samples; ++i)  // a kernel's timed-out wait is named by m.synchronize()
    ms.push_back(timer.timed([&] { m.forward(1.0f, path), m.euler(0.0f); }, 1, [&] { m.synchronize(); }));
  std::sort(ms.begin(), ms.end());
  return median_of_sorted(ms);
}
}  // namespace

GpuResult run_gpu(const Config& c, const Run& run, AttnPath path, const GpuOptions& opt) {
  const int gpus = comm::visible_gpus();
  XS_ASSERT(gpus > 0, "dit: no CUDA GPU is visible (the CPU reference runs with --preset tiny --cpu)");
  validate(c, run, true, gpus);
  const int P = run.ranks;
  XS_ASSERT((P == 1) == (path == AttnPath::single), "dit: the {} path is for {}", to_string(path),
            path == AttnPath::single ? "P = 1" : "P > 1");
  XS_ASSERT(opt.samples >= 1 && opt.warmup >= 0, "dit: timing needs samples >= 1 and warmup >= 0");
  const int blocks = blocks_used(c, run);
  if (opt.weights) check_weights(c, blocks, *opt.weights);
  const Grid grid = token_grid(c, run.tokens);
  const std::vector<float> latent = random_latent(c, run.tokens, opt.latent_seed);
  burstgap::ModelParams peer;
  if (P > 1 || c.ffn == Ffn::moe)  // the Ulysses layer's tile order; the MoE kernel's Interleaved schedule
    peer = burstgap::read_params_or_default(opt.params).for_exchange(P);

  // Rank r holds padded tokens [r·L, (r+1)·L); the real ones are [0, N).
  const int64_t in = c.in_dim(), N = run.tokens, padded = padded_tokens(c, run), L = padded / P;
  GpuResult res;
  res.first_velocity.resize(latent.size());
  res.latent.resize(latent.size());
  std::mutex mu;
  comm::run_ranks(P, comm::Launch::threads, [&](comm::Rank& rank) {
    const int r = rank.rank();
    std::unique_ptr<ulysses::Layer> layer;
    if (P > 1)
      layer = std::make_unique<ulysses::Layer>(
          rank, ulysses::Problem{P, 1, padded, c.heads, c.head_dim, false, N}, peer);
    RankModel m(c, blocks, grid, P, r, rank.stream(), layer.get(), &rank, &peer, padded);
    if (opt.weights) m.load(*opt.weights);
    else m.randomize(opt.weight_seed);
    const int64_t valid = shard_of(grid, P, r, padded).valid;  // this rank's real tokens
    std::vector<float> mine(size_t(L * in), 0.f);                // padding rows: zero latent
    if (valid > 0) std::copy(latent.begin() + r * L * in, latent.begin() + (r * L + valid) * in, mine.begin());
    m.set_latent(mine);
    std::vector<float> v0;
    euler_loop(run.steps, "dit " + std::string(to_string(path)), opt.progress && r == 0, [&](int k, float t, float dt) {
      m.forward(t, path);
      if (k == 0) v0 = m.velocity();
      m.euler(dt);
    });
    const std::vector<float> x = m.latent();
    const double ms = opt.time ? median_step_ms(m, rank.stream(), path, opt.warmup, opt.samples) : 0.0;
    const MoeTimes host = m.moe_host_times().per_forward();
    PhaseTimes phases;  // after the timed steps, so that their events cost the figure above nothing
    m.set_breakdown(true);
    for (int i = 0; i < opt.breakdown_steps; ++i) {
      m.forward(1.0f, path);
      m.euler(0.0f);
      m.synchronize();
      m.add_breakdown(phases);
    }
    m.set_breakdown(false);
    std::lock_guard lock(mu);
    if (phases.total_per_step() > res.phases.total_per_step()) res.phases = phases;
    res.moe_host.wait_us = std::max(res.moe_host.wait_us, host.wait_us);
    res.moe_host.route_us = std::max(res.moe_host.route_us, host.route_us);
    res.moe_host.upload_us = std::max(res.moe_host.upload_us, host.upload_us);
    res.moe_host.plan_gpu_us = std::max(res.moe_host.plan_gpu_us, host.plan_gpu_us);
    res.moe_host.kernel_gpu_us = std::max(res.moe_host.kernel_gpu_us, host.kernel_gpu_us);
    res.moe_host.forwards = std::max(res.moe_host.forwards, m.moe_host_times().forwards);
    if (valid > 0) {  // a rank may hold padding only
      std::copy(v0.begin(), v0.begin() + valid * in, res.first_velocity.begin() + r * L * in);
      std::copy(x.begin(), x.begin() + valid * in, res.latent.begin() + r * L * in);
    }
    res.step_ms = std::max(res.step_ms, ms);
    if (r == 0) {
      res.gemm_epilogues = m.gemm_epilogues();
      res.qkv_projection = m.qkv_projection();
    }
  });
  return res;
}

}  // namespace xstage::dit
