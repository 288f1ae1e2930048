// GPU tests of the fused EP MoE kernel (TMA + wgmma) against the host reference
// (label gpu). Shapes keep hidden a multiple of 256 and I of 128 (the tile
// widths); K steps > pipeline stages so the smem ring wraps; row counts that are
// not multiples of 128 (partial tiles, a second warpgroup with no rows).
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

#include "common/check.hpp"
#include "moe/moe_unfused.hpp"
#include "moe/sm90_moe_fused.hpp"
#include "xstage/comm.hpp"
#include "xstage/device_buffer.hpp"

namespace moe = xstage::moe;
namespace comm = xstage::comm;

namespace {

struct Case {
  moe::Problem p;
  moe::SyntheticRouting routing;
  moe::ScheduleKind kind;
  int launches = 2;  // the second launch checks the cumulative counters
};

template <typename T>
xstage::DeviceBuffer<T> to_device(const std::vector<T>& v) {
  xstage::DeviceBuffer<T> b(v.size());
  XS_CHECK_CUDA(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return b;
}

void run_case(const Case& c) {
  if (comm::visible_gpus() < c.p.ranks) GTEST_SKIP() << "needs " << c.p.ranks << " GPUs";
  const auto routing = moe::synthetic_routing(c.p, c.routing);
  const auto layout = moe::build_layout(c.p, routing);
  const auto w = moe::random_weights(c.p, 21);
  const auto x = moe::random_tokens(c.p, 22);
  const auto ref = moe::reference_forward(c.p, routing, layout, w, x);
  std::mutex mu;
  std::vector<std::string> failures;
  comm::run_ranks(c.p.ranks, comm::Launch::threads, [&](comm::Rank& rank) {
    const int r = rank.rank();
    auto w1 = to_device(w.w1[r]), w2 = to_device(w.w2[r]), xd = to_device(x[r]);
    moe::FusedMoe fused(rank, c.p, layout.max_rows());
    fused.set_weights(w1.get(), w2.get());
    const auto tiles = moe::build_tiles(c.p, layout.ranks[r]);
    const auto cfg = moe::choose_schedule(c.kind, c.p, tiles, fused.blocks(), xstage::burstgap::example_params("peer"));
    const auto order = moe::make_scheduler(cfg)->order(tiles);
    moe::check_order(tiles, order);
    fused.set_inputs(xd.get(), routing[r], layout, order);
    for (int l = 0; l < c.launches; ++l) {
      // Poison: 0xFFFF is a bf16 NaN, so any output the kernel skips fails.
      XS_CHECK_CUDA(cudaMemset(fused.out(), 0xFF, sizeof(std::uint16_t) * c.p.tokens_per_rank * c.p.hidden));
      fused.launch();
      fused.synchronize();
      std::vector<std::uint16_t> out(std::size_t(c.p.tokens_per_rank) * c.p.hidden);
      XS_CHECK_CUDA(cudaMemcpy(out.data(), fused.out(), out.size() * 2, cudaMemcpyDeviceToHost));
      double scale = 0;
      for (float v : ref[r]) scale = std::max(scale, double(std::abs(v)));
      int bad = 0;
      std::string first;
      for (std::size_t i = 0; i < out.size(); ++i) {
        const double got = moe::from_bf16(out[i]), want = ref[r][i];
        // bf16 tolerance: ~2x the reference's own rounding (2^-8 relative) plus a
        // small atol for the fp32-vs-fp64 accumulation order.
        const double tol = 2 * std::ldexp(std::abs(want), -8) + 1e-2 * scale;
        if (!(std::abs(got - want) <= tol) && bad++ == 0)
          first = fmt::format("rank {} launch {} elem {}: got {} want {}", r, l, i, got, want);
      }
      if (bad) {
        std::lock_guard lock(mu);
        failures.push_back(fmt::format("{} ({} bad of {})", first, bad, out.size()));
      }
    }
  });
  for (const auto& f : failures) ADD_FAILURE() << f;
}

}  // namespace

TEST(MoeFusedGpu, UniformExpertWave) {
  run_case({{2, 96, 8, 2, 256, 128}, {.zipf = 0, .seed = 1}, moe::ScheduleKind::expert_wave});
}
TEST(MoeFusedGpu, UniformInterleaved) {
  run_case({{2, 96, 8, 2, 256, 128}, {.zipf = 0, .seed = 1}, moe::ScheduleKind::interleaved});
}
// hidden 512 / I 384: 8 and 6 K steps through the 4-stage ring; several row blocks.
TEST(MoeFusedGpu, UniformManyRowBlocks) {
  for (auto kind : {moe::ScheduleKind::expert_wave, moe::ScheduleKind::interleaved})
    run_case({{2, 512, 8, 2, 512, 384}, {.zipf = 0, .seed = 2}, kind});
}
TEST(MoeFusedGpu, SkewedEmptyExpertsSameRank) {
  for (auto kind : {moe::ScheduleKind::expert_wave, moe::ScheduleKind::interleaved})
    run_case({{2, 300, 16, 4, 512, 256}, {.zipf = 1.5, .empty_experts = 5, .same_rank = 0.7, .seed = 3}, kind});
}
// Every token's top-k experts live on one rank (slot 0's rank).
TEST(MoeFusedGpu, AllTopKOnOneRank) {
  for (auto kind : {moe::ScheduleKind::expert_wave, moe::ScheduleKind::interleaved})
    run_case({{2, 160, 16, 4, 256, 256}, {.zipf = 0.5, .empty_experts = 2, .same_rank = 1.0, .seed = 5}, kind});
}
TEST(MoeFusedGpu, FourRanks) {
  for (auto kind : {moe::ScheduleKind::expert_wave, moe::ScheduleKind::interleaved})
    run_case({{4, 130, 16, 6, 256, 256}, {.zipf = 1.0, .empty_experts = 2, .same_rank = 0.3, .seed = 4}, kind});
}
// EP = 1 (every expert local; the DiT MoE FFN at P = 1): the whole kernel on one GPU,
// dispatch and combine through the rank's own window, skewed routing with empty experts.
TEST(MoeFusedGpu, SingleRank) {
  for (auto kind : {moe::ScheduleKind::expert_wave, moe::ScheduleKind::interleaved})
    run_case({{1, 200, 8, 2, 512, 256}, {.zipf = 1.2, .empty_experts = 2, .seed = 6}, kind});
}
// The unfused baseline (NCCL all-to-all-v + cuBLAS grouped GEMMs, then the same with
// one cuBLAS GEMM per expert) against the host reference, with empty experts (groups left out) and same-rank top-k: it is what the
// bench times the fused kernel against and checks it with. One rank (no peer) and two.
static void check_unfused(const moe::Problem& p, int empty_experts) {
  if (comm::visible_gpus() < p.ranks) GTEST_SKIP() << "needs " << p.ranks << " GPUs";
  const auto routing =
      moe::synthetic_routing(p, {.zipf = 1.5, .empty_experts = empty_experts, .same_rank = 0.7, .seed = 3});
  const auto layout = moe::build_layout(p, routing);
  const auto w = moe::random_weights(p, 21);
  const auto x = moe::random_tokens(p, 22);
  const auto ref = moe::reference_forward(p, routing, layout, w, x);
  std::mutex mu;
  std::vector<std::string> failures;
  comm::run_ranks(p.ranks, comm::Launch::threads, [&](comm::Rank& rank) {
    const int r = rank.rank();
    auto w1 = to_device(w.w1[r]), w2 = to_device(w.w2[r]), xd = to_device(x[r]);
    auto wt = to_device(routing[r].weight);
    moe::UnfusedMoe un(rank, p, layout, w1.get(), w2.get(), xd.get(), wt.get());
    double scale = 0;
    for (float v : ref[r]) scale = std::max(scale, double(std::abs(v)));
    for (bool loop : {false, true}) {  // both GEMM forms the bench may pick
      un.force_per_expert_loop(loop);
      XS_CHECK_CUDA(cudaMemset(un.out(), 0xFF, sizeof(std::uint16_t) * p.tokens_per_rank * p.hidden));
      un.forward();
      std::vector<std::uint16_t> out(std::size_t(p.tokens_per_rank) * p.hidden);
      XS_CHECK_CUDA(cudaMemcpy(out.data(), un.out(), out.size() * 2, cudaMemcpyDeviceToHost));
      int bad = 0;
      for (std::size_t i = 0; i < out.size(); ++i) {
        const double got = moe::from_bf16(out[i]), want = ref[r][i];
        bad += !(std::abs(got - want) <= 2 * std::ldexp(std::abs(want), -8) + 1e-2 * scale);
      }
      std::lock_guard lock(mu);
      std::printf("rank %d: unfused GEMMs: %s\n", r, un.gemm_path().c_str());
      if (bad)
        failures.push_back(fmt::format("rank {}: {} of {} outputs off ({})", r, bad, out.size(), un.gemm_path()));
    }
  });
  for (const auto& f : failures) ADD_FAILURE() << f;
}
TEST(MoeUnfusedGpu, GroupedGemmPathMatchesTheReferenceOneRank) { check_unfused({1, 300, 8, 4, 512, 256}, 2); }
TEST(MoeUnfusedGpu, GroupedGemmPathMatchesTheReference) { check_unfused({2, 300, 16, 4, 512, 256}, 5); }

TEST(MoeFusedGpu, RefusesMoreRanksThanGpus) {
  const int gpus = comm::visible_gpus();
  moe::Problem p{gpus + 1, 64, 8 * (gpus + 1), 2, 256, 128};
  try {
    moe::validate(p, gpus);
    ADD_FAILURE() << "no error";
  } catch (const common::Error& e) {
    EXPECT_NE(std::string(e.what()).find("GPUs but only"), std::string::npos) << e.what();
  }
}
