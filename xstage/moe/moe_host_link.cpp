// One configuration of `xstage bench moe --link host`: the P ranks on one GPU
// (OneGpuGroup, WindowMemory::host: combine rows over the host link), both orders with SM
// stores and with the combine drain (copy engine), sampled in turns; then both orders
// with every window in HBM (a second group, after the first is freed: the reference
// without the link, in turns too). A sample: `per`
// forwards of every rank (FusedMoe::launch_together), each rank on its own stream, all
// streams released by one event; its time is the slowest stream's (the layer ends when
// the last rank's combine has landed), per launch. The rows of both orders are checked
// against each other (the same tiles in another order: within bf16 tolerance), and
// each order's drained rows, and the HBM group's of each order, against the stored ones
// (bitwise). With
// --profile, rank 0's phase shares of both orders in profiled forwards after the timing.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>

#include "common/check.hpp"
#include "common/cuda_check.hpp"
#include "xstage/bench/copy_costs.hpp"
#include "xstage/bench/event_timer.hpp"
#include "xstage/bench/moe_bench.hpp"
#include "bench_inputs.hpp"
#include "xstage/moe/sm90_moe_fused.hpp"

namespace xstage::moe {

namespace {

// The P ranks of one group: inputs, streams, kernels, and one event per stream.
struct HostLinkGroup {
  Problem p;
  Layout layout;
  OneGpuGroup group;
  std::vector<cudaStream_t> streams;
  std::vector<std::unique_ptr<RankInputs>> in;
  std::vector<std::unique_ptr<FusedMoe>> fused;
  std::vector<cudaEvent_t> done;
  cudaEvent_t start = nullptr;

  HostLinkGroup(const Problem& prob, const std::vector<Routing>& routing, WindowMemory memory)
      : p(prob), layout(build_layout(prob, routing)), group(prob, layout.max_rows(), memory) {
    XS_CHECK_CUDA(cudaEventCreate(&start));
    for (int r = 0; r < p.ranks; ++r) {
      cudaStream_t s;
      XS_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      streams.push_back(s);
      cudaEvent_t e;
      XS_CHECK_CUDA(cudaEventCreate(&e));
      done.push_back(e);
      in.push_back(std::make_unique<RankInputs>(p, routing[r], r, s));
      fused.push_back(std::make_unique<FusedMoe>(group, r, s));
      fused[r]->set_weights(in[r]->w1.get(), in[r]->w2.get());
    }
  }
  ~HostLinkGroup() {
    fused.clear();
    for (cudaEvent_t e : done) cudaEventDestroy(e);
    if (start) cudaEventDestroy(start);
    for (cudaStream_t s : streams) cudaStreamDestroy(s);
  }
  HostLinkGroup(const HostLinkGroup&) = delete;
  HostLinkGroup& operator=(const HostLinkGroup&) = delete;

  void set_drain(bool on, int experts_per_copy) {
    for (auto& f : fused) f->set_combine_drain(on, experts_per_copy);
  }
  void set_orders(const std::vector<Routing>& routing, ScheduleKind kind, const burstgap::ModelParams& params) {
    for (int r = 0; r < p.ranks; ++r) {
      const TileLists tiles = build_tiles(p, layout.ranks[r]);
      const ScheduleConfig cfg = choose_schedule(kind, p, tiles, fused[r]->blocks(), params);
      fused[r]->set_inputs(in[r]->x.get(), routing[r], layout, make_scheduler(cfg)->order(tiles));
    }
  }
  // Microseconds per layer forward: `per` launches of every rank, released together.
  double time_us(int per) {
    for (auto& f : fused) f->synchronize();
    XS_CHECK_CUDA(cudaEventRecord(start, streams[0]));
    std::vector<FusedMoe*> all;
    for (int r = 0; r < p.ranks; ++r) {
      if (r > 0) XS_CHECK_CUDA(cudaStreamWaitEvent(streams[r], start, 0));
      all.push_back(fused[r].get());
    }
    for (int i = 0; i < per; ++i) FusedMoe::launch_together(all);
    for (int r = 0; r < p.ranks; ++r) XS_CHECK_CUDA(cudaEventRecord(done[r], streams[r]));
    for (auto& f : fused) f->synchronize();  // names a timed-out wait
    float worst = 0;
    for (cudaEvent_t e : done) {
      float ms = 0;
      XS_CHECK_CUDA(cudaEventElapsedTime(&ms, start, e));
      worst = std::max(worst, ms);
    }
    return double(worst) * 1e3 / per;
  }
  // Rank 0's account of `per` forwards of the current orders (its CycleProfile launches;
  // the other ranks run unprofiled beside it, as they must), after one lead-in forward.
  KernelProfile profile(int per) {
    time_us(1);
    fused[0]->set_profile(true);
    time_us(per);
    KernelProfile k = fused[0]->profile();
    fused[0]->set_profile(false);
    return k;
  }
  std::vector<std::vector<std::uint16_t>> outputs() {
    std::vector<std::vector<std::uint16_t>> out;
    for (auto& f : fused) {
      f->synchronize();
      out.push_back(bench::to_host(f->out(), in.front()->out_elems(p)));
    }
    return out;
  }
};

// The copy engine on this GPU's host link, once per process and rank count (the drain's
// prediction): the rate of one 64 MiB device-to-host copy, and a stream operation's fixed
// cost as the drain meets it: P streams at once (as the P side streams), each with 32 met
// stream waits and 32 copies of 128 KiB (a drain copy at P = 8, 512 tokens), while a load
// streams HBM on every SM (as the MoE kernels do while the drain copies). (The rate holds
// under that load; the cost per operation rises from 1.3 us to about 3 us at P = 8, and
// with 1.3 the drain at P = 8 measured 1.15x its prediction, median.)
burstgap::CopyCosts host_link_copy_costs(int ranks) {
  static std::map<int, burstgap::CopyCosts> measured;
  if (auto it = measured.find(ranks); it != measured.end()) return it->second;
  constexpr std::size_t kBytes = std::size_t(64) << 20, kCopy = std::size_t(128) << 10;
  constexpr int kPairs = 32;
  DeviceBuffer<unsigned char> from(kBytes);
  MappedHostBuffer<unsigned char> to(kBytes);
  bench::CopyCostProbe probe;
  probe.streams = ranks;
  probe.pairs = kPairs;
  probe.under_hbm_load = true;
  probe.copy = [&](cudaStream_t stream, int r, int i) {
    const std::size_t at = ((std::size_t(r) * kPairs + i) % (kBytes / kCopy)) * kCopy;
    XS_CHECK_CUDA(cudaMemcpyAsync(to.host() + at, from.get() + at, kCopy, cudaMemcpyDeviceToHost, stream));
  };
  probe.copy_bytes = double(kCopy);
  probe.bulk = [&](cudaStream_t stream) {
    XS_CHECK_CUDA(cudaMemcpyAsync(to.host(), from.get(), kBytes, cudaMemcpyDeviceToHost, stream));
  };
  probe.bulk_bytes = double(kBytes);
  return measured[ranks] = bench::measure_copy_costs(probe);
}

// The SMs' read rate of this GPU's mapped host memory, once per process (the drain's
// reads back in its prediction): every SM reading 256 MiB once.
double host_link_read_GBps() {
  static const double measured = [] {
    MappedHostBuffer<unsigned char> from(std::size_t(256) << 20);
    std::memset(from.host(), 1, from.size());
    const double GBps = bench::measure_host_read_GBps(from.device(), from.size(), nullptr);
    XS_CHECK_CUDA(cudaDeviceSynchronize());
    return GBps;
  }();
  return measured;
}

// Over the ranks: the largest difference of one rank's outputs (max_rel_diff).
double max_rel_diff_over_ranks(const std::vector<std::vector<std::uint16_t>>& a,
                               const std::vector<std::vector<std::uint16_t>>& b) {
  double worst = 0;
  for (std::size_t r = 0; r < a.size(); ++r) worst = std::max(worst, max_rel_diff(a[r], b[r]));
  return worst;
}

// Both orders of `g` (and, with `drains` 2, each also with the combine drain in groups of
// `experts_per_copy`), sampled in turns so that clock drift moves all alike: each
// schedule's median forward (`rounds` samples of `per` after a warm-up) and its outputs
// of the last round, indexed [interleaved][drain]. Leaves the drain off.
struct TurnSamples {
  double us[2][2] = {};
  std::vector<std::vector<std::uint16_t>> out[2][2];
};
TurnSamples sample_in_turns(HostLinkGroup& g, const std::vector<Routing>& routing,
                            const burstgap::ModelParams& params, int drains, int experts_per_copy, int warmup,
                            int rounds, int per) {
  std::vector<double> us[2][2];
  TurnSamples s;
  for (int round = -1; round < rounds; ++round)  // round -1: warm-up
    for (ScheduleKind kind : {ScheduleKind::expert_wave, ScheduleKind::interleaved})
      for (int drain = 0; drain < drains; ++drain) {
        const int il = kind == ScheduleKind::interleaved;
        if (drains > 1) g.set_drain(drain, experts_per_copy);
        g.set_orders(routing, kind, params);
        const double t = g.time_us(round < 0 ? std::max(1, warmup) : per);
        if (round < 0) continue;
        us[il][drain].push_back(t);
        if (round == rounds - 1) s.out[il][drain] = g.outputs();
      }
  if (drains > 1) g.set_drain(false, 1);
  for (int il = 0; il < 2; ++il)
    for (int drain = 0; drain < drains; ++drain) {
      std::sort(us[il][drain].begin(), us[il][drain].end());
      s.us[il][drain] = median_of_sorted(us[il][drain]);
    }
  return s;
}

}  // namespace

HostLinkRow run_host_link_bench(const BenchConfig& c, const burstgap::ModelParams& params, const BenchOptions& o) {
  const Problem p = c.problem();  // validated with the group (all ranks on GPU 0)
  XS_ASSERT(p.ranks >= 2, "bench moe --link host: EP must be >= 2 (got {}): the host link carries the exchange",
            p.ranks);
  XS_CHECK_CUDA(cudaSetDevice(0));
  int sms = 0;
  XS_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  HostLinkRow row;
  row.config = c;
  row.copy = host_link_copy_costs(p.ranks);
  row.read_GBps = host_link_read_GBps();
  row.sms = sms;
  predict_host_link_row(row, params, sms);
  const auto routing = synthetic_routing(p, c.synthetic());
  auto g = std::make_unique<HostLinkGroup>(p, routing, WindowMemory::host);
  const int rounds = std::min(o.iters, 5), per = std::max(1, (o.iters + rounds - 1) / rounds);
  // Four schedules in turns: each order with SM stores and with the combine drain.
  const TurnSamples link = sample_in_turns(*g, routing, params, 2, row.drain_experts_per_copy, o.warmup, rounds, per);
  const auto& out = link.out;
  row.max_rel_err = max_rel_diff_over_ranks(out[1][0], out[0][0]);
  const bool drain_bitwise = out[0][1] == out[0][0] && out[1][1] == out[1][0];
  if (o.profile) {  // after all the timing, so that the timed launches carry no profiling code
    g->set_orders(routing, ScheduleKind::expert_wave, params);
    row.profile_expert_wave = g->profile(per);
    g->set_orders(routing, ScheduleKind::interleaved, params);
    row.profile_interleaved = g->profile(per);
    row.profiled = true;
  }
  g.reset();  // its windows and weights, before the HBM group takes as much again
  HostLinkGroup in_hbm(p, routing, WindowMemory::device);
  const TurnSamples hbm = sample_in_turns(in_hbm, routing, params, 1, 1, o.warmup, rounds, per);
  row.expert_wave_hbm_us = hbm.us[0][0];
  row.interleaved_hbm_us = hbm.us[1][0];
  const bool hbm_bitwise = hbm.out[0][0] == out[0][0] && hbm.out[1][0] == out[1][0];
  row.expert_wave_us = link.us[0][0];
  row.interleaved_us = link.us[1][0];
  row.expert_wave_drain_us = link.us[0][1];
  row.interleaved_drain_us = link.us[1][1];
  row.advised_us = row.measured_advised_us();
  row.speedup = row.expert_wave_us / row.advised_us;
  row.correct = row.max_rel_err <= kMaxRelErr && drain_bitwise && hbm_bitwise;
  return row;
}

}  // namespace xstage::moe
