// One configuration of `xstage bench moe`: both fused schedules and the unfused
// path on the same inputs, timed with CUDA events, checked in the same loop. The
// two schedules are sampled in turns and reported as the median of their samples;
// the unfused path as the mean of its forwards.
#include <algorithm>
#include <array>
#include <cmath>
#include <mutex>

#include "common/check.hpp"
#include "moe_unfused.hpp"
#include "sm90_moe_fused.hpp"
#include "xstage/bench_timing.hpp"
#include "xstage/check_cuda.hpp"
#include "xstage/comm.hpp"
#include "xstage/device_buffer.hpp"
#include "xstage/moe_bench.hpp"

namespace xstage::moe {

namespace {

double max_rel_diff(const std::vector<std::uint16_t>& a, const std::vector<std::uint16_t>& b) {
  double scale = 1e-30, diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double x = from_bf16(a[i]), y = from_bf16(b[i]);
    scale = std::max(scale, std::abs(y));
    diff = std::isfinite(x) ? std::max(diff, std::abs(x - y)) : INFINITY;
  }
  return diff / scale;
}

std::vector<std::uint16_t> copy_out(const std::uint16_t* d, std::size_t n) {
  std::vector<std::uint16_t> h(n);
  XS_CHECK_CUDA(cudaMemcpy(h.data(), d, n * 2, cudaMemcpyDeviceToHost));
  return h;
}

}  // namespace

BenchRow run_bench(const BenchConfig& c, const burstgap::ModelParams& params, const BenchOptions& o) {
  const int warmup = o.warmup, iters = o.iters, compare_raster = o.compare_raster;
  const bool device_routing = o.device_routing, compare_dispatch = o.compare_dispatch;
  XS_ASSERT(compare_raster >= 0, "bench moe: --compare-raster must be >= 0 (got {})", compare_raster);
  const Problem p = c.problem();
  validate(p, comm::visible_gpus());
  XS_ASSERT(warmup >= 0 && iters >= 1, "bench moe: warmup >= 0 and iters >= 1 (got {}, {})", warmup, iters);
  const auto routing = synthetic_routing(p, c.synthetic());
  const Layout layout = build_layout(p, routing);

  BenchRow row;
  row.config = c;
  std::mutex mu;
  std::vector<double> ew(p.ranks), il(p.ranks), il_cmp(p.ranks), il_before(p.ranks), il_by_block(p.ranks),
      il_by_consumer(p.ranks), un(p.ranks), gemm(p.ranks), err(p.ranks);
  std::vector<double> remote_bytes(p.ranks), from_logits(p.ranks), planner(p.ranks);
  std::vector<Routing> gathered(p.ranks);  // device routing: every rank's choice, for the host-routed check
  std::vector<int> bitwise(p.ranks, 1);
  std::vector<std::array<double, 6>> phases(p.ranks, std::array<double, 6>{});
  comm::run_ranks(p.ranks, comm::Launch::threads, [&](comm::Rank& rank) {
    const int r = rank.rank(), epr = p.experts_per_rank();
    cudaStream_t st = rank.stream();
    DeviceBuffer<std::uint16_t> w1(std::size_t(epr) * 2 * p.intermediate * p.hidden);
    DeviceBuffer<std::uint16_t> w2(std::size_t(epr) * p.hidden * p.intermediate);
    DeviceBuffer<std::uint16_t> x(std::size_t(p.tokens_per_rank) * p.hidden);
    fill_random_bf16(w1.get(), w1.size(), 1000 + r, 0.02f, st);
    fill_random_bf16(w2.get(), w2.size(), 2000 + r, 0.02f, st);
    fill_random_bf16(x.get(), x.size(), 3000 + r, 1.0f, st);
    DeviceBuffer<float> wt(routing[r].weight.size());
    copy_to_device(wt.get(), routing[r].weight.data(), wt.size() * 4);
    XS_CHECK_CUDA(cudaStreamSynchronize(st));

    cudaEvent_t e0, e1;
    XS_CHECK_CUDA(cudaEventCreate(&e0));
    XS_CHECK_CUDA(cudaEventCreate(&e1));
    const std::size_t n_out = std::size_t(p.tokens_per_rank) * p.hidden;

    UnfusedMoe unfused(rank, p, layout, w1.get(), w2.get(), x.get(), wt.get());
    for (int i = 0; i < warmup; ++i) unfused.forward();
    unfused.choose_gemm_path(3);  // the faster cuBLAS form is the baseline
    double un_us = 0, gemm_us = 0;
    for (int i = 0; i < iters; ++i) {
      const auto t = unfused.forward();
      un_us += t.total_us / iters;
      gemm_us += t.gemm_us / iters;
    }
    const auto want = copy_out(unfused.out(), n_out);

    FusedMoe fused(rank, p, layout.max_rows());
    fused.set_weights(w1.get(), w2.get());
    if (o.blocks > 0) fused.set_blocks(o.blocks);
    const TileLists tiles = build_tiles(p, layout.ranks[r]);
    double e_max = 0;
    ScheduleConfig chosen;
    // What is timed: an order and the kernel's modes. 0 Expert-Wave, 1 Interleaved, then
    // the comparisons asked for; each records its index.
    using Dispatch = FusedMoe::DispatchMode;
    using Release = FusedMoe::ReleaseMode;
    struct Variant {
      std::vector<WorkItem> order;
      Dispatch dispatch = Dispatch::overlapped;
      Release release = Release::by_agent;
    };
    std::vector<Variant> variants;
    auto add = [&](std::vector<WorkItem> order, Dispatch d = Dispatch::overlapped, Release rl = Release::by_agent) {
      variants.push_back({std::move(order), d, rl});
      return static_cast<int>(variants.size()) - 1;
    };
    for (ScheduleKind kind : {ScheduleKind::expert_wave, ScheduleKind::interleaved}) {
      const ScheduleConfig cfg = choose_schedule(kind, p, tiles, fused.blocks(), params);
      if (kind == ScheduleKind::interleaved) chosen = cfg;
      add(make_scheduler(cfg)->order(tiles));
    }
    const std::vector<WorkItem> interleaved = variants[1].order;
    // The same interleaved schedule over tiles in another raster group (the same items,
    // so the same dependencies and outputs).
    const int raster_k =
        compare_raster > 0 ? add(make_scheduler(chosen)->order(build_tiles(p, layout.ranks[r], compare_raster))) : -1;
    // The interleaved order with all of the dispatch before the tiles, a warp per row,
    // then by the whole CTA per row (the kernel's dispatch until session 8).
    const int before_k = compare_dispatch ? add(interleaved, Dispatch::before_tiles) : -1;
    const int by_block_k = compare_dispatch ? add(interleaved, Dispatch::by_block) : -1;
    // The interleaved order with the consumers releasing their own tiles.
    const int by_consumer_k = o.compare_release ? add(interleaved, Dispatch::overlapped, Release::by_consumer) : -1;
    const int n_orders = static_cast<int>(variants.size());
    std::vector<double> us(n_orders, 0.0);
    // The schedules are sampled in turns (Expert-Wave, Interleaved, Expert-Wave, ...),
    // so that a drift of the card's clocks over the row moves all alike; each sample is
    // `per` back-to-back launches after an untimed lead-in launch (so no sample holds the
    // host's first launch onto an idle GPU), the median of `rounds` samples is the
    // schedule's time.
    const int rounds = std::min(iters, 5), per = (iters + rounds - 1) / rounds;
    std::vector<std::vector<double>> samples(n_orders);
    for (int round = -1; round < rounds; ++round)  // round -1: warm-up
      for (int k = 0; k < n_orders; ++k) {
        fused.set_inputs(x.get(), routing[r], layout, variants[k].order);  // waits for the previous launches
        fused.set_dispatch(variants[k].dispatch);
        fused.set_release(variants[k].release);
        if (round < 0) {
          for (int i = 0; i < warmup; ++i) fused.launch();
          continue;
        }
        fused.synchronize();
        rank.host_barrier();
        fused.launch();  // lead-in: the GPU is busy when the timed launches are enqueued
        XS_CHECK_CUDA(cudaEventRecord(e0, st));
        for (int i = 0; i < per; ++i) fused.launch();
        XS_CHECK_CUDA(cudaEventRecord(e1, st));
        fused.synchronize();  // names the wait if the kernel timed out
        float ms = 0;
        XS_CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
        samples[k].push_back(ms * 1e3 / per);
        if (round == rounds - 1) e_max = std::max(e_max, max_rel_diff(copy_out(fused.out(), n_out), want));
      }
    for (int k = 0; k < n_orders; ++k) {
      std::sort(samples[k].begin(), samples[k].end());
      us[k] = median_of_sorted(samples[k]);
    }
    if (device_routing) {
      // Logits whose top-k is this rank's routing in slot order (the weights then follow
      // from the logits, not from the synthetic routing).
      const int T = p.tokens_per_rank, K = p.topk, E = p.experts;
      std::vector<float> lg(std::size_t(T) * E, -8.0f);
      for (int t = 0; t < T; ++t)
        for (int j = 0; j < K; ++j) lg[std::size_t(t) * E + routing[r].expert[std::size_t(t) * K + j]] = 4.0f - 0.25f * j;
      DeviceBuffer<float> dl(lg.size());
      copy_to_device(dl.get(), lg.data(), lg.size() * 4);
      FusedMoe dev(rank, p, route::max_recv_rows(p));
      dev.set_weights(w1.get(), w2.get());
      const ScheduleConfig dcfg =
          choose_schedule(ScheduleKind::interleaved, p, expected_tiles(p), dev.blocks(), params);
      std::vector<cudaEvent_t> mid(2 * per);
      for (auto& e : mid) XS_CHECK_CUDA(cudaEventCreate(&e));
      std::vector<double> total_s, plan_s;
      for (int round = -1; round < rounds; ++round) {
        dev.synchronize();
        rank.host_barrier();
        // A lead-in forward keeps the GPU busy while the timed ones are enqueued, so the
        // events time the GPU's work, not the host's launches onto an idle GPU (the
        // planner is six short kernels).
        dev.route_on_device(x.get(), dl.get(), dcfg);
        dev.launch();
        XS_CHECK_CUDA(cudaEventRecord(e0, st));
        const int n = round < 0 ? std::max(1, warmup) : per;
        for (int i = 0; i < n; ++i) {
          if (round >= 0) XS_CHECK_CUDA(cudaEventRecord(mid[2 * i], st));
          dev.route_on_device(x.get(), dl.get(), dcfg);
          if (round >= 0) XS_CHECK_CUDA(cudaEventRecord(mid[2 * i + 1], st));
          dev.launch();
        }
        XS_CHECK_CUDA(cudaEventRecord(e1, st));
        dev.synchronize();  // names a timed-out wait or non-finite logits
        if (round < 0) continue;
        float ms = 0, plan = 0;
        XS_CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
        for (int i = 0; i < per; ++i) {
          float m = 0;
          XS_CHECK_CUDA(cudaEventElapsedTime(&m, mid[2 * i], mid[2 * i + 1]));
          plan += m;
        }
        total_s.push_back(ms * 1e3 / per);
        plan_s.push_back(plan * 1e3 / per);
      }
      for (auto& e : mid) cudaEventDestroy(e);
      // The planner's phases, in separate profiled forwards (the events between the
      // kernels are not in the timed ones).
      // (Nothing was profiled before, so there is nothing to reset; planner_phases()
      // would synchronise and leave the GPU idle again.)
      dev.synchronize();
      dev.route_on_device(x.get(), dl.get(), dcfg);  // the lead-in, not profiled
      dev.launch();
      dev.profile_planner(true);
      for (int i = 0; i < std::max(per, 3); ++i) {
        dev.route_on_device(x.get(), dl.get(), dcfg);
        dev.launch();
      }
      dev.synchronize();
      const FusedMoe::PlannerPhases ph = dev.planner_phases();
      dev.profile_planner(false);
      const double n_ph = std::max(1, ph.calls);
      phases[r] = {ph.topk_us / n_ph, ph.gather_us / n_ph, ph.count_us / n_ph,
                   ph.scan_us / n_ph, ph.order_us / n_ph, ph.assign_us / n_ph};
      std::sort(total_s.begin(), total_s.end());
      std::sort(plan_s.begin(), plan_s.end());
      const auto dev_out = copy_out(dev.out(), n_out);
      const Routing mine = dev.device_routing();
      {
        std::lock_guard lock(mu);
        gathered[r] = mine;
        from_logits[r] = median_of_sorted(total_s);
        planner[r] = median_of_sorted(plan_s);
        if (r == 0) row.from_logits_config = dcfg;
      }
      rank.host_barrier();
      // The same routing through the host path: bitwise the same output.
      const Layout L = build_layout(p, gathered);
      fused.set_inputs(x.get(), mine, L, make_scheduler(dcfg)->order(build_tiles(p, L.ranks[r])));
      fused.set_dispatch(FusedMoe::DispatchMode::overlapped);  // as the device-routed forward
      fused.set_release(FusedMoe::ReleaseMode::by_agent);
      fused.launch();
      fused.synchronize();
      bitwise[r] = copy_out(fused.out(), n_out) == dev_out;
    }
    if (o.profile) {
      // The advisor's interleaved order in profiled launches (a lead-in first), after all
      // the timing: the profiled kernel reads the SM clock around its phases.
      fused.set_inputs(x.get(), routing[r], layout, interleaved);
      fused.set_dispatch(FusedMoe::DispatchMode::overlapped);
      fused.set_release(FusedMoe::ReleaseMode::by_agent);
      rank.host_barrier();
      fused.launch();
      fused.set_profile(true);
      for (int i = 0; i < per; ++i) fused.launch();
      const KernelProfile prof = fused.profile();
      fused.set_profile(false);
      if (r == 0) {
        std::lock_guard lock(mu);
        row.profile = prof;
      }
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    // Bytes this rank stores to other ranks: dispatch rows out, expert rows back.
    long long rows_out = 0, rows_back = 0;
    for (int i = 0; i < p.tokens_per_rank * p.topk; ++i) rows_out += layout.ranks[r].send_rank[i] != r;
    for (int row = 0; row < layout.ranks[r].rows(); ++row) rows_back += layout.ranks[r].recv_src_rank[row] != r;
    std::lock_guard lock(mu);
    ew[r] = us[0];
    il[r] = us[1];
    auto us_of = [&](int k) { return k >= 0 ? us[k] : 0.0; };
    il_cmp[r] = us_of(raster_k);
    il_before[r] = us_of(before_k);
    il_by_block[r] = us_of(by_block_k);
    il_by_consumer[r] = us_of(by_consumer_k);
    un[r] = un_us;
    gemm[r] = gemm_us;
    err[r] = e_max;
    remote_bytes[r] = double(rows_out + rows_back) * p.hidden * 2;
    if (r == 0) {
      row.interleaved = chosen;
      row.unfused_gemm = unfused.gemm_path();
    }
  });
  // The slowest rank sets the layer's time.
  row.expert_wave_us = *std::max_element(ew.begin(), ew.end());
  row.interleaved_us = *std::max_element(il.begin(), il.end());
  row.compare_raster = compare_raster;
  row.interleaved_compare_raster_us = *std::max_element(il_cmp.begin(), il_cmp.end());
  row.compare_dispatch = compare_dispatch;
  row.interleaved_before_tiles_us = *std::max_element(il_before.begin(), il_before.end());
  row.interleaved_by_block_us = *std::max_element(il_by_block.begin(), il_by_block.end());
  row.compare_release = o.compare_release;
  row.profiled = o.profile;
  row.interleaved_release_by_consumer_us = *std::max_element(il_by_consumer.begin(), il_by_consumer.end());
  row.unfused_us = *std::max_element(un.begin(), un.end());
  row.device_routing = device_routing;
  row.from_logits_us = *std::max_element(from_logits.begin(), from_logits.end());
  row.planner_us = *std::max_element(planner.begin(), planner.end());
  row.from_logits_bitwise = device_routing && std::all_of(bitwise.begin(), bitwise.end(), [](int b) { return b; });
  for (int k = 0; k < 6; ++k)
    for (const auto& ph : phases) row.planner_phase_us[k] = std::max(row.planner_phase_us[k], ph[k]);
  row.grouped_gemm_us = *std::max_element(gemm.begin(), gemm.end());
  row.max_rel_err = *std::max_element(err.begin(), err.end());
  row.correct = row.max_rel_err <= 2e-2;  // bf16 outputs of two different accumulation orders
  row.speedup = row.expert_wave_us / row.interleaved_us;
  const double flops = 2.0 * p.tokens_per_rank * p.topk * 3.0 * p.hidden * p.intermediate;  // per GPU, average
  const double best = std::min(row.expert_wave_us, row.interleaved_us);
  row.tflops = flops / (best * 1e6);
  row.gemm_tflops = flops / (row.grouped_gemm_us * 1e6);
  row.nvlink_GBps = *std::max_element(remote_bytes.begin(), remote_bytes.end()) / (best * 1e3);
  return row;
}

}  // namespace xstage::moe
