// GPU tests of the fused EP MoE kernel (TMA + wgmma) against the host reference
// (label gpu). Shapes keep hidden a multiple of 256 and I of 128 (the tile
// widths); K steps > pipeline stages so the smem ring wraps; row counts that are
// not multiples of 128 (partial tiles, a second warpgroup with no rows).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <mutex>
#include <random>
#include <set>

#include "common/check.hpp"
#include "common/cuda_check.hpp"
#include "common/test_child.hpp"
#include "xstage/moe/device_route.hpp"
#include "xstage/moe/unfused.hpp"
#include "xstage/moe/sm90_moe_fused.hpp"
#include "xstage/comm/comm.hpp"
#include "common/device_buffer.hpp"

namespace moe = xstage::moe;
namespace comm = xstage::comm;

namespace {

struct Case {
  moe::Problem p;
  moe::SyntheticRouting routing;
  moe::ScheduleKind kind;
  int launches = 2;  // the second launch checks the cumulative counters
  // Then a profiled launch (the kernel's CycleProfile instantiation): bitwise the same
  // output as the first launch, and phase shares that sum to 1.
  bool profiled = false;
};

std::vector<std::uint16_t> download_out(moe::FusedMoe& fused, const moe::Problem& p) {
  std::vector<std::uint16_t> out(std::size_t(p.tokens_per_rank) * p.hidden);
  XS_CHECK_CUDA(cudaMemcpy(out.data(), fused.out(), out.size() * 2, cudaMemcpyDeviceToHost));
  return out;
}

// "" when rank r's output of launch l is within bf16 tolerance of the reference: about
// 2x the reference's own rounding (2^-8 relative) plus a small atol for the fp32-vs-fp64
// accumulation order. NaN (the poison) fails.
std::string compare_with_reference(const std::vector<std::uint16_t>& out, const std::vector<float>& ref, int r, int l) {
  double scale = 0;
  for (float v : ref) scale = std::max(scale, double(std::abs(v)));
  int bad = 0;
  std::string first;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const double got = moe::from_bf16(out[i]), want = ref[i];
    const double tol = 2 * std::ldexp(std::abs(want), -8) + 1e-2 * scale;
    if (!(std::abs(got - want) <= tol) && bad++ == 0)
      first = fmt::format("rank {} launch {} elem {}: got {} want {}", r, l, i, got, want);
  }
  return bad ? fmt::format("{} ({} bad of {})", first, bad, out.size()) : "";
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
    auto w1 = xstage::upload(w.w1[r]), w2 = xstage::upload(w.w2[r]), xd = xstage::upload(x[r]);
    moe::FusedMoe fused(rank, c.p, layout.max_rows());
    fused.set_weights(w1.get(), w2.get());
    const auto tiles = moe::build_tiles(c.p, layout.ranks[r]);
    const auto cfg = moe::choose_schedule(c.kind, c.p, tiles, fused.blocks(), xstage::burstgap::example_params("peer"));
    const auto order = moe::make_scheduler(cfg)->order(tiles);
    moe::check_order(tiles, order);
    fused.set_inputs(xd.get(), routing[r], layout, order);
    std::vector<std::uint16_t> first_out;
    for (int l = 0; l < c.launches; ++l) {
      // Poison: 0xFFFF is a bf16 NaN, so any output the kernel skips fails.
      xstage::fill_device(fused.out(), 0xFF, sizeof(std::uint16_t) * c.p.tokens_per_rank * c.p.hidden);
      fused.launch();
      fused.synchronize();
      const std::vector<std::uint16_t> out = download_out(fused, c.p);
      const std::string bad = compare_with_reference(out, ref[r], r, l);
      if (!bad.empty()) {
        std::lock_guard lock(mu);
        failures.push_back(bad);
      }
      if (l == 0) first_out = out;
      else if (out != first_out) {
        std::lock_guard lock(mu);
        failures.push_back(fmt::format("rank {} launch {} differs bitwise from the first launch", r, l));
      }
    }
    if (!c.profiled) return;
    // A profiled launch (the kernel's CycleProfile instantiation) computes the same
    // output bitwise, and its phase shares are shares.
    fused.set_profile(true);
    xstage::fill_device(fused.out(), 0xFF, sizeof(std::uint16_t) * c.p.tokens_per_rank * c.p.hidden);
    fused.launch();
    const moe::KernelProfile pf = fused.profile();
    fused.set_profile(false);
    std::vector<std::uint16_t> out(std::size_t(c.p.tokens_per_rank) * c.p.hidden);
    XS_CHECK_CUDA(cudaMemcpy(out.data(), fused.out(), out.size() * 2, cudaMemcpyDeviceToHost));
    const double parts = pf.start + pf.item_wait + pf.mainloop + pf.epilogue + pf.combine_wait + pf.combine;
    std::lock_guard lock(mu);
    if (out != first_out) failures.push_back(fmt::format("rank {}: the profiled launch differs bitwise", r));
    if (pf.launches != 1 || !(pf.items_per_warpgroup > 0) || std::abs(parts - 1.0) > 1e-9 || !(pf.mainloop > 0) ||
        !(pf.epilogue > 0) || pf.stage_wait > pf.mainloop || pf.start < 0 || !(pf.total_us > 0))
      failures.push_back(fmt::format("rank {}: profile launches {} items {} shares start {} item {} main {} (tma {}) "
                                     "epi {} combine {} + {} (sum {}), total {} us",
                                     r, pf.launches, pf.items_per_warpgroup, pf.start, pf.item_wait, pf.mainloop,
                                     pf.stage_wait, pf.epilogue, pf.combine_wait, pf.combine, parts, pf.total_us));
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
    run_case({{2, 300, 16, 4, 512, 256}, {.zipf = 1.5, .empty_experts = 5, .same_rank = 0.7, .seed = 3}, kind, 2,
              true});
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
// dispatch and combine through the rank's own window, skewed routing with empty experts;
// then a profiled launch (bitwise the same output).
TEST(MoeFusedGpu, SingleRank) {
  for (auto kind : {moe::ScheduleKind::expert_wave, moe::ScheduleKind::interleaved})
    run_case({{1, 200, 8, 2, 512, 256}, {.zipf = 1.2, .empty_experts = 2, .seed = 6}, kind, 2, true});
}
// P ranks on one GPU (moe::OneGpuGroup: every window plain memory of this GPU, the P
// kernels at once on P streams, SMs / P CTAs each): the P > 1 dispatch, L2 epilogue and
// combine index maps and counters without NCCL, for EP = 2, 4, 8; skewed routing with
// empty experts and same-rank top-k; three launches (cumulative counters), each within
// tolerance of the reference and bitwise equal to the first. Returns every rank's output.
std::vector<std::vector<std::uint16_t>> run_on_one_gpu(const Case& c,
                                                       moe::WindowMemory memory = moe::WindowMemory::device,
                                                       bool drain = false, int experts_per_copy = 1) {
  const auto routing = moe::synthetic_routing(c.p, c.routing);
  const auto layout = moe::build_layout(c.p, routing);
  const auto w = moe::random_weights(c.p, 23);
  const auto x = moe::random_tokens(c.p, 24);
  const auto ref = moe::reference_forward(c.p, routing, layout, w, x);
  const int P = c.p.ranks;
  moe::OneGpuGroup group(c.p, layout.max_rows(), memory);
  std::vector<cudaStream_t> streams(P);
  std::vector<xstage::DeviceBuffer<std::uint16_t>> w1, w2, xd;
  std::vector<std::unique_ptr<moe::FusedMoe>> fused;
  for (int r = 0; r < P; ++r) {
    XS_CHECK_CUDA(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
    w1.push_back(xstage::upload(w.w1[r]));
    w2.push_back(xstage::upload(w.w2[r]));
    xd.push_back(xstage::upload(x[r]));
    fused.push_back(std::make_unique<moe::FusedMoe>(group, r, streams[r]));
    fused[r]->set_weights(w1[r].get(), w2[r].get());
    fused[r]->set_combine_drain(drain, experts_per_copy);
    const auto tiles = moe::build_tiles(c.p, layout.ranks[r]);
    const auto cfg = moe::choose_schedule(c.kind, c.p, tiles, fused[r]->blocks(), xstage::burstgap::example_params("peer"));
    const auto order = moe::make_scheduler(cfg)->order(tiles);
    moe::check_order(tiles, order);
    fused[r]->set_inputs(xd[r].get(), routing[r], layout, order);
  }
  int sms = 0;
  XS_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  EXPECT_LE(fused[0]->blocks() * P, sms) << "the P kernels must fit on the GPU at once";
  std::vector<std::vector<std::uint16_t>> first_out(P);
  for (int l = 0; l < c.launches; ++l) {
    for (int r = 0; r < P; ++r) {
      xstage::fill_device(fused[r]->out(), 0xFF, sizeof(std::uint16_t) * c.p.tokens_per_rank * c.p.hidden);
    }
    XS_CHECK_CUDA(cudaDeviceSynchronize());
    std::vector<moe::FusedMoe*> all;
    for (auto& f : fused) all.push_back(f.get());
    moe::FusedMoe::launch_together(all);  // all P before any wait
    for (int r = 0; r < P; ++r) fused[r]->synchronize();
    for (int r = 0; r < P; ++r) {
      const auto out = download_out(*fused[r], c.p);
      const std::string bad = compare_with_reference(out, ref[r], r, l);
      EXPECT_EQ(bad, "");
      if (l == 0) first_out[r] = out;
      else EXPECT_TRUE(out == first_out[r]) << "rank " << r << " launch " << l << " differs bitwise from the first";
    }
  }
  fused.clear();
  for (cudaStream_t s : streams) XS_CHECK_CUDA(cudaStreamDestroy(s));
  return first_out;
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
    auto w1 = xstage::upload(w.w1[r]), w2 = xstage::upload(w.w2[r]), xd = xstage::upload(x[r]);
    auto wt = xstage::upload(routing[r].weight);
    moe::UnfusedMoe un(rank, p, layout, w1.get(), w2.get(), xd.get(), wt.get());
    double scale = 0;
    for (float v : ref[r]) scale = std::max(scale, double(std::abs(v)));
    for (bool loop : {false, true}) {  // both GEMM forms the bench may pick
      un.force_per_expert_loop(loop);
      xstage::fill_device(un.out(), 0xFF, sizeof(std::uint16_t) * p.tokens_per_rank * p.hidden);
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

// ---------------------------------------------------------------- routing on the GPU

// The top-k kernel against moe::route_from_logits on logits with many ties: the same
// experts in the same order, the same weights (to the float rounding of the two exp
// implementations), and a non-finite logit flagged with the token's experts distinct.
TEST(MoeRouteGpu, TopkMatchesTheHostRouting) {
  if (comm::visible_gpus() < 1) GTEST_SKIP() << "needs a GPU";
  XS_CHECK_CUDA(cudaSetDevice(0));
  std::mt19937 rng(5);
  for (auto [experts, topk] : {std::pair{16, 2}, std::pair{16, 8}, std::pair{64, 6}, std::pair{8, 1}, std::pair{256, 8}}) {
    const int tokens = 777;
    std::vector<float> logits(size_t(tokens) * experts);
    for (auto& x : logits) x = 0.5f * float(int(rng() % 7)) - 1.5f;
    const moe::Routing want = moe::route_from_logits(logits, tokens, experts, topk);
    auto dl = xstage::upload(logits);
    xstage::DeviceBuffer<int> de(size_t(tokens) * topk + 1);
    xstage::DeviceBuffer<float> dw(size_t(tokens) * topk);
    xstage::fill_device(de.get(), 0xFF, de.size() * 4);
    xstage::fill_device(dw.get(), 0xFF, dw.size() * 4);
    int* flag = de.get() + size_t(tokens) * topk;
    xstage::fill_device(flag, 0, 4);
    moe::route::topk_softmax(dl.get(), tokens, experts, topk, de.get(), dw.get(), flag, nullptr);
    XS_CHECK_CUDA(cudaDeviceSynchronize());
    const auto e = de.to_host(de.size());
    const auto w = dw.to_host(dw.size());
    EXPECT_EQ(e.back(), 0) << "no logit is non-finite";
    int off = 0;
    for (size_t i = 0; i < want.expert.size(); ++i) {
      off += e[i] != want.expert[i];
      EXPECT_NEAR(w[i], want.weight[i], 1e-7 * std::abs(want.weight[i])) << experts << " " << topk << " " << i;
    }
    EXPECT_EQ(off, 0) << experts << " experts, top-" << topk;
    // Token 3: NaN everywhere; token 5: +inf at expert 2.
    for (int j = 0; j < experts; ++j) logits[size_t(3) * experts + j] = NAN;
    logits[size_t(5) * experts + 2] = INFINITY;
    xstage::copy_to_device(dl.get(), logits.data(), logits.size() * 4);
    moe::route::topk_softmax(dl.get(), tokens, experts, topk, de.get(), dw.get(), flag, nullptr);
    const auto e2 = de.to_host(de.size());
    EXPECT_EQ(e2.back(), 1) << "the non-finite logits are flagged";
    std::set<int> t3(e2.begin() + 3 * topk, e2.begin() + 4 * topk);
    EXPECT_EQ(int(t3.size()), topk) << "an all-NaN token still gets distinct experts";
    EXPECT_EQ(e2[size_t(5) * topk], 2) << "+inf ranks first";
  }
}

// The GPU planner against build_layout and the schedulers, for P = 1 .. 8 without a
// communicator (the gathered experts are uploaded): every rank's maps, expert offsets,
// order and dispatch targets (which accumulate over two plans). Outputs are poisoned.
TEST(MoeRouteGpu, PlanEqualsTheHostLayoutAndOrder) {
  if (comm::visible_gpus() < 1) GTEST_SKIP() << "needs a GPU";
  XS_CHECK_CUDA(cudaSetDevice(0));
  struct PlanCase {
    moe::Problem p;
    moe::SyntheticRouting r;
    moe::ScheduleConfig c;
    int group;
  };
  using K = moe::ScheduleKind;
  const std::vector<PlanCase> cases = {
      {{1, 4096, 16, 2, 3072, 3072}, {.seed = 1}, {K::interleaved, 132, 3, 1, 2, ""}, moe::kMoeRasterGroup},  // dit-moe
      {{1, 999, 8, 2, 512, 256}, {.zipf = 1.2, .empty_experts = 2, .seed = 2}, {K::expert_wave, 132, 2, 1, 1, ""}, 3},
      {{2, 300, 2, 2, 256, 256}, {.seed = 3}, {K::interleaved, 132, 1, 1, 1, ""}, 1},  // one expert per rank, k = 2
      {{4, 700, 64, 6, 1024, 512}, {.zipf = 1.0, .empty_experts = 9, .same_rank = 0.5, .seed = 4},
       {K::interleaved, 132, 2, 2, 3, ""}, 4},
      {{8, 300, 64, 6, 512, 256}, {.zipf = 0.5, .empty_experts = 3, .same_rank = 0.3, .seed = 5},
       {K::interleaved, 132, 1, 3, 5, ""}, moe::kMoeRasterGroup},
  };
  for (const auto& pc : cases) {
    const moe::Problem& p = pc.p;
    const auto routing = moe::synthetic_routing(p, pc.r);
    const auto L = moe::build_layout(p, routing);
    std::vector<int> all;
    for (const auto& r : routing) all.insert(all.end(), r.expert.begin(), r.expert.end());
    auto dall = xstage::upload(all);
    const int tk = p.tokens_per_rank * p.topk, epr = p.experts_per_rank(), max_rows = moe::route::max_recv_rows(p);
    for (int r = 0; r < p.ranks; ++r) {
      const auto tiles = moe::build_tiles(p, L.ranks[r], pc.group);
      const auto want = moe::make_scheduler(pc.c)->order(tiles);
      xstage::DeviceBuffer<int> send_rank(tk), send_row(tk), off(epr + 1), src_rank(max_rows), src_slot(max_rows),
          n_items(1), cc(moe::route::chunk_count_size(p)), start(p.experts), tables(moe::route::plan_table_size(p));
      xstage::DeviceBuffer<moe::WorkItem> items(moe::route::item_capacity(p, max_rows));
      xstage::DeviceBuffer<unsigned> expect(epr);
      for (auto* b : {&send_rank, &send_row, &off, &src_rank, &src_slot, &n_items})
        xstage::fill_device(b->get(), 0xFF, b->size() * 4);
      xstage::fill_device(items.get(), 0xFF, items.size() * sizeof(moe::WorkItem));
      xstage::fill_device(expect.get(), 0, epr * 4);
      moe::route::PlanOut out{send_rank.get(), send_row.get(), off.get(), src_rank.get(), src_slot.get(),
                              items.get(), n_items.get(), expect.get()};
      const auto spec = moe::order_spec(pc.c, p, pc.group);
      for (int twice = 0; twice < 2; ++twice)
        moe::route::plan(p, r, dall.get(), spec, max_rows, {cc.get(), start.get(), tables.get()}, out, nullptr);
      XS_CHECK_CUDA(cudaDeviceSynchronize());
      const auto& R = L.ranks[r];
      const std::string where = fmt::format("{} rank {}", moe::describe(p), r);
      EXPECT_EQ(send_rank.to_host(tk), R.send_rank) << where;
      EXPECT_EQ(send_row.to_host(tk), R.send_row) << where;
      EXPECT_EQ(off.to_host(epr + 1), R.expert_offset) << where;
      EXPECT_EQ(src_rank.to_host(R.rows()), R.recv_src_rank) << where;
      EXPECT_EQ(src_slot.to_host(R.rows()), R.recv_src_slot) << where;
      const int n = n_items.to_host(1)[0];
      ASSERT_EQ(n, int(want.size())) << where;
      EXPECT_EQ(items.to_host(n), want) << where;
      const auto got_expect = expect.to_host(epr);
      for (int e = 0; e < epr; ++e) EXPECT_EQ(got_expect[e], 2u * R.count(e)) << where << " expert " << e;
    }
  }
}

// A forward routed on the GPU from router logits equals the host-routed forward of the
// same routing bitwise (the GPU's routing is read back and laid out on the host), over
// three forwards with fresh logits (cumulative targets), and the first one is within
// bf16 tolerance of the host reference; the GPU's experts equal route_from_logits'.
TEST(MoeFusedGpu, RoutedOnTheDeviceEqualsRoutedOnTheHost) {
  for (const moe::Problem p : {moe::Problem{1, 700, 8, 2, 512, 256}, moe::Problem{2, 300, 16, 4, 512, 256}}) {
    if (comm::visible_gpus() < p.ranks) {
      std::printf("skipped %s: needs %d GPUs\n", moe::describe(p).c_str(), p.ranks);
      continue;
    }
    const auto w = moe::random_weights(p, 31);
    const auto x = moe::random_tokens(p, 32);
    std::mutex mu;
    std::vector<moe::Routing> gathered(p.ranks);
    std::vector<std::string> failures;
    comm::run_ranks(p.ranks, comm::Launch::threads, [&](comm::Rank& rank) {
      const int r = rank.rank();
      auto w1 = xstage::upload(w.w1[r]), w2 = xstage::upload(w.w2[r]), xd = xstage::upload(x[r]);
      moe::FusedMoe dev(rank, p, moe::route::max_recv_rows(p)), host(rank, p, moe::route::max_recv_rows(p));
      dev.set_weights(w1.get(), w2.get());
      host.set_weights(w1.get(), w2.get());
      const auto cfg = moe::choose_schedule(moe::ScheduleKind::interleaved, p, moe::expected_tiles(p), dev.blocks(),
                                            xstage::burstgap::example_params("peer"));
      const std::size_t n_out = std::size_t(p.tokens_per_rank) * p.hidden;
      auto fail = [&](const std::string& f) {
        std::lock_guard lock(mu);
        failures.push_back(fmt::format("{} rank {}: {}", moe::describe(p), r, f));
      };
      for (int l = 0; l < 3; ++l) {
        std::mt19937 rng(100 * l + r);
        std::vector<float> logits(std::size_t(p.tokens_per_rank) * p.experts);
        for (auto& v : logits) v = 0.25f * float(int(rng() % 9)) + 0.01f * float(rng() % 100);
        auto dl = xstage::upload(logits);
        xstage::fill_device(dev.out(), 0xFF, n_out * 2);
        dev.route_on_device(xd.get(), dl.get(), cfg);
        dev.launch();
        dev.synchronize();
        const moe::Routing mine = dev.device_routing();
        if (mine.expert != moe::route_from_logits(logits, p.tokens_per_rank, p.experts, p.topk).expert)
          fail(fmt::format("forward {}: the GPU chose other experts than route_from_logits", l));
        {
          std::lock_guard lock(mu);
          gathered[r] = mine;
        }
        rank.host_barrier();
        const auto layout = moe::build_layout(p, gathered);
        const auto tiles = moe::build_tiles(p, layout.ranks[r]);
        host.set_inputs(xd.get(), mine, layout, moe::make_scheduler(cfg)->order(tiles));
        xstage::fill_device(host.out(), 0xFF, n_out * 2);
        host.launch();
        host.synchronize();
        std::vector<std::uint16_t> a(n_out), b(n_out);
        XS_CHECK_CUDA(cudaMemcpy(a.data(), dev.out(), n_out * 2, cudaMemcpyDeviceToHost));
        XS_CHECK_CUDA(cudaMemcpy(b.data(), host.out(), n_out * 2, cudaMemcpyDeviceToHost));
        if (a != b) fail(fmt::format("forward {}: device-routed and host-routed outputs differ", l));
        if (l == 0) {
          const auto ref = moe::reference_forward(p, gathered, layout, w, x);
          double scale = 0;
          for (float v : ref[r]) scale = std::max(scale, double(std::abs(v)));
          int bad = 0;
          for (std::size_t i = 0; i < n_out; ++i) {
            const double got = moe::from_bf16(a[i]), want = ref[r][i];
            bad += !(std::abs(got - want) <= 2 * std::ldexp(std::abs(want), -8) + 1e-2 * scale);
          }
          if (bad) fail(fmt::format("{} of {} outputs off the reference", bad, n_out));
        }
        rank.host_barrier();  // gathered[] is rewritten by the next forward
      }
      // A NaN logit: the forward completes, synchronize names it.
      std::vector<float> logits(std::size_t(p.tokens_per_rank) * p.experts, 0.5f);
      logits[7] = NAN;
      auto dl = xstage::upload(logits);
      dev.route_on_device(xd.get(), dl.get(), cfg);
      dev.launch();
      try {
        dev.synchronize();
        fail("a NaN logit was not reported");
      } catch (const common::Error& e) {
        if (std::string(e.what()).find("non-finite") == std::string::npos) fail(e.what());
      }
      try {
        host.route_on_device(xd.get(), dl.get(), cfg);
        fail("a host-routed FusedMoe took device routing");
      } catch (const common::Error& e) {
        if (std::string(e.what()).find("construct another") == std::string::npos) fail(e.what());
      }
    });
    for (const auto& f : failures) ADD_FAILURE() << f;
  }
}

TEST(MoeFusedGpu, TwoRanksOnOneGpu) {
  run_on_one_gpu({{2, 200, 8, 2, 512, 256}, {.zipf = 1.0, .empty_experts = 2, .same_rank = 0.3, .seed = 8},
                  moe::ScheduleKind::interleaved, 3});
}
TEST(MoeFusedGpu, FourRanksOnOneGpu) {
  for (auto kind : {moe::ScheduleKind::expert_wave, moe::ScheduleKind::interleaved})
    run_on_one_gpu({{4, 130, 16, 6, 256, 256}, {.zipf = 1.0, .empty_experts = 2, .same_rank = 0.3, .seed = 4}, kind, 3});
}
TEST(MoeFusedGpu, EightRanksOnOneGpu) {
  run_on_one_gpu({{8, 96, 16, 4, 512, 384}, {.zipf = 1.2, .empty_experts = 3, .same_rank = 0.5, .seed = 9},
                  moe::ScheduleKind::interleaved, 3});
}

// The same P kernels with the combine rows in mapped pinned host memory (the L2
// epilogue's stores over the host link; dispatch rows and counters in HBM), and with
// the combine drain (the rows copied across by each rank's side stream, one expert's
// at a time and three experts' merged): the outputs equal the HBM group's bitwise, launch
// after launch.
TEST(MoeFusedGpu, HostLinkWindowsGiveTheHbmOutputsBitwise) {
  for (const Case& c : {Case{{2, 200, 8, 2, 512, 256}, {.zipf = 1.0, .empty_experts = 2, .same_rank = 0.3, .seed = 8},
                             moe::ScheduleKind::interleaved, 2},
                        Case{{4, 130, 16, 6, 256, 256}, {.zipf = 1.0, .empty_experts = 2, .same_rank = 0.3, .seed = 4},
                             moe::ScheduleKind::expert_wave, 2},
                        Case{{8, 96, 16, 4, 512, 384}, {.zipf = 1.2, .empty_experts = 3, .same_rank = 0.5, .seed = 9},
                             moe::ScheduleKind::interleaved, 3}}) {
    const auto hbm = run_on_one_gpu(c);
    const auto host = run_on_one_gpu(c, moe::WindowMemory::host);
    const auto drained = run_on_one_gpu(c, moe::WindowMemory::host, true);
    const auto merged = run_on_one_gpu(c, moe::WindowMemory::host, true, 3);
    ASSERT_EQ(host.size(), hbm.size());
    ASSERT_EQ(drained.size(), hbm.size());
    ASSERT_EQ(merged.size(), hbm.size());
    for (std::size_t r = 0; r < hbm.size(); ++r) {
      EXPECT_TRUE(host[r] == hbm[r]) << "P = " << c.p.ranks << ", rank " << r << ": host-link output differs";
      EXPECT_TRUE(drained[r] == hbm[r]) << "P = " << c.p.ranks << ", rank " << r << ": drained output differs";
      EXPECT_TRUE(merged[r] == hbm[r]) << "P = " << c.p.ranks << ", rank " << r << ": merged drain differs";
    }
  }
}

TEST(MoeFusedGpu, CombineDrainNeedsHostLinkWindows) {
  const moe::Problem p{2, 64, 8, 2, 256, 256};
  const auto layout = moe::build_layout(p, moe::synthetic_routing(p, {.seed = 3}));
  moe::OneGpuGroup group(p, layout.max_rows());
  moe::FusedMoe fused(group, 0, nullptr);
  try {
    fused.set_combine_drain(true);
    ADD_FAILURE() << "no error";
  } catch (const common::Error& e) {
    EXPECT_NE(std::string(e.what()).find("WindowMemory::host"), std::string::npos) << e.what();
  }
}

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

// A rank that never launches (moe::OneGpuGroup, P = 2, rank 1 absent): rank 0's kernel must
// not hang. Its producer's wait for the dispatch rows of a local expert times out first
// (the waits inside its CTA, which that wait holds up, have twice the budget), ends the kernel, and
// synchronize() throws one line naming the rank, the wait, and the ranks the rows come from.
static int absent_peer_child(moe::WindowMemory memory, bool drain = false) {
  const moe::Problem p{2, 200, 8, 2, 512, 256};
  const auto routing = moe::synthetic_routing(p, {.seed = 12});
  const auto layout = moe::build_layout(p, routing);
  const auto w = moe::random_weights(p, 23);
  const auto x = moe::random_tokens(p, 24);
  moe::OneGpuGroup group(p, layout.max_rows(), memory);
  cudaStream_t stream;
  XS_CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  auto w1 = xstage::upload(w.w1[0]), w2 = xstage::upload(w.w2[0]), xd = xstage::upload(x[0]);
  moe::FusedMoe fused(group, 0, stream);
  fused.set_weights(w1.get(), w2.get());
  fused.set_combine_drain(drain);
  const auto tiles = moe::build_tiles(p, layout.ranks[0]);
  const auto cfg = moe::choose_schedule(moe::ScheduleKind::interleaved, p, tiles, fused.blocks(),
                                        xstage::burstgap::example_params("peer"));
  fused.set_inputs(xd.get(), routing[0], layout, moe::make_scheduler(cfg)->order(tiles));
  std::printf("child: rank 0 receives %d rows from rank 1\n", layout.ranks[0].recv_from[1]);
  fused.launch();  // rank 1 never launches
  try {
    fused.synchronize();
  } catch (const std::exception& e) {
    std::printf("child: %s\n", e.what());
    std::fflush(stdout);
    std::_Exit(7);  // the context is gone after the fault: no clean-up
  }
  std::printf("child: rank 0 finished without rank 1\n");
  return 0;
}

static int child_main(const std::string& name) {
  if (name == "absent") return absent_peer_child(moe::WindowMemory::device);
  if (name == "absent_host") return absent_peer_child(moe::WindowMemory::host);
  if (name == "absent_drain") return absent_peer_child(moe::WindowMemory::host, true);
  return 2;
}

TEST(MoeFusedGpu, AbsentPeerTimesOutNamingTheWaitAndTheSources) {
  // `timeout` turns a hang into exit status 124 (a failure here, not a stuck test). With
  // the windows over the host link too: the counters the waits poll are host memory.
  for (const char* child : {"absent", "absent_host", "absent_drain"}) {
    const auto [code, out] = common::run_self_as_child(child, "XSTAGE_WAIT_TIMEOUT_MS=300 timeout 60");
    EXPECT_EQ(code, 7) << child << ": " << out;
    EXPECT_NE(out.find("device wait timed out on rank 0"), std::string::npos) << child << ": " << out;
    EXPECT_NE(out.find("dispatch rows of a local expert"), std::string::npos) << child << ": " << out;
    EXPECT_NE(out.find("from rank 1"), std::string::npos) << child << ": " << out;
    std::printf("%s", out.c_str());  // the child's lines: the message a user sees
  }
}

int main(int argc, char** argv) {
  common::request_stream_queues();  // before any CUDA call
  return common::test_main_with_children(argc, argv, child_main);
}
