// Burst-Gap model tests: closed forms against the simulation, the fit against
// known parameters, the holdout split, strict params parsing, the advisor.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <random>

#include "common/plot.hpp"
#include "common/testing.hpp"
#include "xstage/burstgap/nelder_mead.hpp"
#include "common/check.hpp"
#include "common/png.hpp"
#include "xstage/burstgap/burstgap.hpp"

namespace bg = xstage::burstgap;
namespace fs = std::filesystem;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// peer-like: 132 SMs inject 6.6 TB/s into a 350 GB/s drain with 4 MiB of capacity.
bg::ModelParams peer() {
  bg::ModelParams p;
  p.t0_ns_per_byte = 0.02;
  p.issue_latency_ns = 40;
  p.drain_GBps = 350;
  p.capacity_bytes_gpu = 4.0 * 1024 * 1024;
  p.sms_max = 132;
  return p;
}

using common::error_of;

// The issue-mode rows of a synthetic sweep of `truth` with 3 % noise.
std::vector<xstage::SweepRow> synthetic_issue_rows(const bg::ModelParams& truth, std::uint64_t seed) {
  std::vector<xstage::SweepRow> issue;
  for (const auto& r : bg::synthesize_sweep(truth, bg::SynthGrid{}, 0.03, seed))
    if (r.mode == "issue") issue.push_back(r);
  return issue;
}
}  // namespace

// ---------------------------------------------------------------- model closed forms

TEST(BurstGapModel, IssueNoFasterThanDrainNeverBackpressures) {
  auto p = peer();
  const int sms = 6;  // R = 6 / 0.02 = 300 B/ns <= D = 350
  ASSERT_LE(bg::rates(p, sms).inject, bg::rates(p, sms).drain);
  for (double bytes : {1024.0, 65536.0, 1048576.0}) {
    for (const auto& o : bg::simulate_schedule(p, sms, bytes, 0, 200)) {
      EXPECT_FALSE(o.backpressured);
      EXPECT_DOUBLE_EQ(o.overhead_ns, 0);
      EXPECT_DOUBLE_EQ(o.occupancy_end, 0);
    }
    EXPECT_EQ(bg::clean_bursts(p, sms, bytes, 0), -1);
    EXPECT_EQ(bg::min_gap_ns(p, sms, bytes), 0);
    EXPECT_EQ(bg::max_burst_bytes(p, sms), kInf);
    EXPECT_DOUBLE_EQ(bg::steady_issue_ns(p, sms, bytes, 0), bg::free_issue_ns(p, bytes));
  }
}

TEST(BurstGapModel, SingleBurstFromEmpty) {
  auto p = peer();
  p.issue_latency_ns = 0;
  const int n = 132;
  const double b = 16384, r = n / p.t0_ns_per_byte, d = p.drain_GBps, c = *p.capacity_bytes_gpu;
  // Fits: q' = (R - D) * B * t0 < C.
  auto o = bg::issue_burst(p, n, b, 0);
  EXPECT_FALSE(o.backpressured);
  EXPECT_DOUBLE_EQ(o.issue_ns, b * p.t0_ns_per_byte);
  EXPECT_NEAR(o.occupancy_end, (r - d) * b * p.t0_ns_per_byte, 1e-6);
  EXPECT_NEAR(o.recovery_ns, o.occupancy_end / d, 1e-9);
  // Overflows: fills at t_f = C / (R - D), the rest leaves at D.
  const double big = 65536, w = n * big, tf = c / (r - d);
  o = bg::issue_burst(p, n, big, 0);
  EXPECT_TRUE(o.backpressured);
  EXPECT_NEAR(o.issue_ns, tf + (w - r * tf) / d, 1e-6);
  EXPECT_NEAR(o.issue_ns, (w - c) / d, 1e-6);  // the same, simplified
  EXPECT_DOUBLE_EQ(o.occupancy_end, c);
}

TEST(BurstGapModel, SustainedIssueTimeTendsToWOverD) {
  const auto p = peer();
  for (int n : {33, 66, 132})
    for (double b : {4096.0, 16384.0}) {
      const auto s = bg::simulate_schedule(p, n, b, 0, 400);
      EXPECT_NEAR(s.back().issue_ns, n * b / p.drain_GBps, 1e-6 * n * b) << n << " SMs x " << b;
      EXPECT_NEAR(bg::steady_issue_ns(p, n, b, 0), n * b / p.drain_GBps, 1e-9 * n * b);
    }
}

TEST(BurstGapModel, SteadyStateClosedFormMatchesSimulation) {
  auto p = peer();
  p.drain_per_sm_GBps = 20;
  for (std::optional<double> q : {std::optional<double>{}, std::optional<double>{0.0}, std::optional<double>{262144.0}})
  for (int n : {1, 8, 33, 132})
    for (double b : {1024.0, 8192.0, 32768.0, 131072.0})
      for (double g : {0.0, 500.0, 3000.0, 12000.0, 50000.0}) {
        p.backlog_limit_bytes = q;
        const auto s = bg::simulate_schedule(p, n, b, g, 3000);
        EXPECT_NEAR(bg::steady_issue_ns(p, n, b, g), s.back().issue_ns, 1e-6 * s.back().issue_ns + 1e-9)
            << n << " SMs, " << b << " B, gap " << g;
      }
}

TEST(BurstGapModel, MinGapIsTheBoundaryOfBackpressure) {
  const auto p = peer();
  const int n = 132;
  const double b = 16384;
  const double r = n / p.t0_ns_per_byte, d = p.drain_GBps;
  const double g_min = bg::min_gap_ns(p, n, b);
  EXPECT_NEAR(g_min, (r - d) * b * p.t0_ns_per_byte / d - p.issue_latency_ns, 1e-9);
  EXPECT_NEAR(g_min + p.issue_latency_ns, n * b / d - b * p.t0_ns_per_byte, 1e-9);  // = W/D - B*t0
  EXPECT_EQ(bg::clean_bursts(p, n, b, g_min * 1.001), -1);
  for (const auto& o : bg::simulate_schedule(p, n, b, g_min * 1.001, 500)) EXPECT_FALSE(o.backpressured);
  // Just below: the stage creeps up and stalls after the predicted number of clean bursts.
  for (double f : {0.0, 0.5, 0.9, 0.99}) {
    const int k = bg::clean_bursts(p, n, b, g_min * f);
    ASSERT_GE(k, 0) << f;
    const auto s = bg::simulate_schedule(p, n, b, g_min * f, k + 2);
    for (int i = 0; i < k; ++i) EXPECT_FALSE(s[i].backpressured) << f << " burst " << i;
    EXPECT_TRUE(s[k].backpressured) << f;
  }
  EXPECT_EQ(bg::clean_bursts(p, n, b, 0), 2);  // 1.95 MiB per burst into 4 MiB: the third stalls
}

TEST(BurstGapModel, BurstOverCapacityHasNoMinGapButALargestBurst) {
  const auto p = peer();
  const int n = 132;
  const double b = 65536;  // Delta = 8.2 MB > 4 MiB
  EXPECT_GT(bg::burst_increment_bytes(p, n, b), *p.capacity_bytes_gpu);
  EXPECT_EQ(bg::min_gap_ns(p, n, b), kInf);
  EXPECT_EQ(bg::clean_bursts(p, n, b, 1e9), 0);
  const double bmax = bg::max_burst_bytes(p, n);
  EXPECT_NEAR(bg::burst_increment_bytes(p, n, bmax), *p.capacity_bytes_gpu, 1e-3);
  EXPECT_TRUE(std::isfinite(bg::min_gap_ns(p, n, std::floor(bmax))));
  EXPECT_FALSE(std::isfinite(bg::min_gap_ns(p, n, bmax * 1.01)));
  // With a long gap every burst starts empty and only the overflow waits: T = a0 + (W - C)/D.
  EXPECT_NEAR(bg::steady_issue_ns(p, n, b, 1e6), p.issue_latency_ns + (n * b - *p.capacity_bytes_gpu) / p.drain_GBps,
              1e-6);
}

TEST(BurstGapModel, PerSmLimits) {
  auto p = peer();
  p.drain_per_sm_GBps = 20;
  p.capacity_scope = bg::CapacityScope::both;
  p.capacity_bytes_per_sm = 64 * 1024;
  EXPECT_DOUBLE_EQ(bg::rates(p, 4).drain, 80);
  EXPECT_DOUBLE_EQ(bg::rates(p, 132).drain, 350);
  EXPECT_DOUBLE_EQ(bg::rates(p, 4).capacity, 4 * 65536);
  EXPECT_DOUBLE_EQ(bg::rates(p, 132).capacity, 4.0 * 1024 * 1024);
  p.capacity_scope = bg::CapacityScope::sm;
  p.capacity_bytes_gpu.reset();
  EXPECT_DOUBLE_EQ(bg::rates(p, 132).capacity, 132 * 65536);
}

// The floor L: a burst too small to fill it takes L (the rest of it injects nothing, so
// the stage drains meanwhile); a large one costs a0 + B*t0 as without it.
TEST(BurstGapModel, IssueFloorSetsTheFreeTimeOfSmallBursts) {
  auto p = peer();
  p.issue_latency_ns = 100;
  p.issue_floor_ns = 250;
  EXPECT_DOUBLE_EQ(bg::latency_ns(p, 1024), 250 - 1024 * 0.02);
  EXPECT_DOUBLE_EQ(bg::free_issue_ns(p, 1024), 250);
  EXPECT_DOUBLE_EQ(bg::free_issue_ns(p, 65536), 100 + 65536 * 0.02);
  EXPECT_DOUBLE_EQ(bg::issue_burst(p, 1, 1024, 0).issue_ns, 250);
  EXPECT_DOUBLE_EQ(bg::steady_issue_ns(p, 1, 1024, 0), 250);
  // The longer latency drains more before the stores: a smaller smallest free gap.
  auto q = p;
  q.issue_floor_ns.reset();
  EXPECT_LT(bg::min_gap_ns(p, 132, 4096), bg::min_gap_ns(q, 132, 4096));
  EXPECT_NEAR(bg::min_gap_ns(q, 132, 4096) - bg::min_gap_ns(p, 132, 4096), bg::latency_ns(p, 4096) - 100, 1e-9);
}

// The buffer b: a burst's first b bytes leave within a0, so one that fits takes a0 and a
// larger one a0 + (B - b)*t0; past b the latency is negative, and the fluid part (the
// stalls, the smallest free gap) runs on it as on any latency.
TEST(BurstGapModel, IssueBufferTakesTheFirstBytesWithinTheLatency) {
  auto p = peer();
  p.issue_latency_ns = 120;
  p.issue_buffer_bytes = 8192;
  EXPECT_DOUBLE_EQ(bg::free_issue_ns(p, 4096), 120);
  EXPECT_DOUBLE_EQ(bg::free_issue_ns(p, 8192), 120);
  EXPECT_DOUBLE_EQ(bg::free_issue_ns(p, 65536), 120 + (65536 - 8192) * 0.02);
  EXPECT_DOUBLE_EQ(bg::latency_ns(p, 65536), 120 - 8192 * 0.02);
  EXPECT_LT(bg::latency_ns(p, 65536), 0);
  EXPECT_DOUBLE_EQ(bg::issue_burst(p, 1, 65536, 0).issue_ns, bg::free_issue_ns(p, 65536));
  EXPECT_DOUBLE_EQ(bg::steady_issue_ns(p, 1, 65536, 0), bg::free_issue_ns(p, 65536));
  // Drain-limited: the period still carries W at D, whatever the latency.
  const double w = 132 * 65536.0, g = 1000;
  EXPECT_NEAR(bg::steady_issue_ns(p, 132, 65536, g) + g, w / p.drain_GBps, 1e-6 * w / p.drain_GBps);
  auto q = p;
  q.issue_buffer_bytes.reset();
  EXPECT_NEAR(bg::min_gap_ns(p, 132, 16384) - bg::min_gap_ns(q, 132, 16384), 8192 * 0.02, 1e-9);
  // With a floor as well, the larger of the two.
  p.issue_floor_ns = 200;
  EXPECT_DOUBLE_EQ(bg::free_issue_ns(p, 4096), 200);
  EXPECT_DOUBLE_EQ(bg::free_issue_ns(p, 65536), 120 + (65536 - 8192) * 0.02);
}

// The backlog limit Q: a burst that finds more than Q in the stage waits for it to drain
// to Q. It shortens the run of clean bursts before a stall (sustained injection just
// above the drain stalls early), not the steady state, the smallest free gap or what
// one burst from empty can put in.
TEST(BurstGapModel, BacklogLimitEndsTheCleanRunEarly) {
  auto p = peer();
  const int n = 132;
  const double b = 16384, g_min = bg::min_gap_ns(p, n, b), g = 0.9 * g_min;
  const int k = bg::clean_bursts(p, n, b, g);
  p.backlog_limit_bytes = 65536;
  EXPECT_DOUBLE_EQ(bg::min_gap_ns(p, n, b), g_min);
  const int kq = bg::clean_bursts(p, n, b, g);
  EXPECT_LT(kq, k);
  const auto s = bg::simulate_schedule(p, n, b, g, kq + 3);
  for (int i = 0; i < kq; ++i) EXPECT_FALSE(s[i].backpressured) << i;
  EXPECT_TRUE(s[kq].backpressured);
  // The waiting burst starts its stores on exactly Q.
  const double wait = s[kq].issue_ns - bg::free_issue_ns(p, b);
  EXPECT_NEAR(s[kq].occupancy_start - (wait + p.issue_latency_ns) * p.drain_GBps, 65536, 1e-6);
  EXPECT_NEAR(s.back().issue_ns, bg::steady_issue_ns(p, n, b, g), 1e-6 * s.back().issue_ns);
  // One burst from empty does not see Q.
  p.backlog_limit_bytes = 0;
  auto none = peer();
  EXPECT_DOUBLE_EQ(bg::issue_burst(p, n, 65536, 0).issue_ns, bg::issue_burst(none, n, 65536, 0).issue_ns);
  EXPECT_EQ(bg::clean_bursts(p, n, b, g), 1);  // the second burst finds backlog
}

TEST(BurstGapModel, RejectsBadShapes) {
  const auto p = peer();
  EXPECT_THROW(bg::issue_burst(p, 0, 1024, 0), common::Error);
  EXPECT_THROW(bg::issue_burst(p, 4, -1, 0), common::Error);
  EXPECT_THROW(bg::simulate_schedule(p, 4, 1024, -5, 3), common::Error);
  EXPECT_THROW(bg::simulate_schedule(p, 4, 1024, 0, 0), common::Error);
}

// ---------------------------------------------------------------- optimiser

TEST(BurstGapFit, NelderMeadFindsTheRosenbrockMinimum) {
  auto rosen = [](std::span<const double> x) {
    return 100 * std::pow(x[1] - x[0] * x[0], 2) + std::pow(1 - x[0], 2);
  };
  bg::NelderMeadOptions o;
  o.max_evals = 5000;
  const auto r = bg::nelder_mead(rosen, {-1.2, 1.0}, o);
  EXPECT_NEAR(r.x[0], 1.0, 1e-3);
  EXPECT_NEAR(r.x[1], 1.0, 2e-3);
  EXPECT_LE(r.evals, 5000);
}

// ---------------------------------------------------------------- fitting

TEST(BurstGapFit, RecoversKnownParametersFromNoisySyntheticRows) {
  struct Case {
    bg::ModelParams truth;
    bool expect_drain_per_sm;
  };
  auto local = bg::example_params("local");
  auto peer_truth = bg::example_params("peer");  // per-SM drain 20 GB/s binds below 17 SMs
  for (const auto& [truth, per_sm] : {Case{peer_truth, true}, Case{local, false}}) {
    const auto rows = bg::synthesize_sweep(truth, bg::SynthGrid{}, 0.03, 11);
    std::vector<xstage::SweepRow> issue;
    for (const auto& r : rows)
      if (r.mode == "issue") issue.push_back(r);
    std::vector<std::string> notes;
    const auto p = bg::fit_group(issue, bg::FitTarget::mean, &notes);
    SCOPED_TRACE(truth.pattern);
    EXPECT_NEAR(p.t0_ns_per_byte / truth.t0_ns_per_byte, 1, 0.03);
    EXPECT_NEAR(p.drain_GBps / truth.drain_GBps, 1, 0.05);
    EXPECT_NEAR(p.issue_latency_ns / truth.issue_latency_ns, 1, 0.25);
    EXPECT_NEAR(p.loop_overhead_ns / truth.loop_overhead_ns, 1, 0.05);
    ASSERT_TRUE(p.capacity_bytes_gpu.has_value());
    EXPECT_EQ(p.capacity_scope, bg::CapacityScope::gpu);
    EXPECT_EQ(p.capacity_bound, bg::Bound::fit);
    EXPECT_NEAR(*p.capacity_bytes_gpu / *truth.capacity_bytes_gpu, 1, 0.10);
    EXPECT_EQ(p.drain_per_sm_GBps.has_value(), per_sm);
    if (per_sm) EXPECT_NEAR(*p.drain_per_sm_GBps / *truth.drain_per_sm_GBps, 1, 0.10);
    EXPECT_LT(p.fit_rel_error_median, 0.04);
    EXPECT_EQ(p.n_rows, static_cast<int>(issue.size()));
    EXPECT_FALSE(p.issue_floor_ns.has_value()) << "a floor the data do not have: " << *p.issue_floor_ns;
    EXPECT_FALSE(p.issue_buffer_bytes.has_value()) << "a buffer the data do not have: " << *p.issue_buffer_bytes;
    EXPECT_FALSE(p.backlog_limit_bytes.has_value()) << "a backlog limit the data do not have: " << *p.backlog_limit_bytes;
    EXPECT_EQ(p.sms_max, 132);
  }
}

// Small bursts that all take L: the fit finds the floor, and the line through the large
// bursts keeps its slope.
TEST(BurstGapFit, FindsTheIssueFloorWhenTheDataShowIt) {
  auto truth = bg::example_params("peer");
  truth.issue_floor_ns = truth.issue_latency_ns + 3 * 4096 * truth.t0_ns_per_byte;  // binds below 12 KiB
  const auto issue = synthetic_issue_rows(truth, 5);
  std::vector<std::string> notes;
  const auto p = bg::fit_group(issue, bg::FitTarget::mean, &notes);
  ASSERT_TRUE(p.issue_floor_ns.has_value());
  EXPECT_NEAR(*p.issue_floor_ns / *truth.issue_floor_ns, 1, 0.10);
  EXPECT_NEAR(p.t0_ns_per_byte / truth.t0_ns_per_byte, 1, 0.03);
  EXPECT_LT(p.fit_rel_error_median, 0.04);
}

// Small bursts that all take a0 and large ones a0 + (B - b)*t0 (the host link's knee):
// the fit finds the buffer and keeps the slope of the large bursts.
TEST(BurstGapFit, FindsTheIssueBufferWhenTheDataShowIt) {
  auto truth = bg::example_params("peer");
  truth.issue_latency_ns = 150;
  truth.issue_buffer_bytes = 12 * 1024;
  const auto issue = synthetic_issue_rows(truth, 5);
  std::vector<std::string> notes;
  const auto p = bg::fit_group(issue, bg::FitTarget::mean, &notes);
  ASSERT_TRUE(p.issue_buffer_bytes.has_value()) << notes.front();
  EXPECT_NEAR(*p.issue_buffer_bytes / *truth.issue_buffer_bytes, 1, 0.15);
  EXPECT_NEAR(p.issue_latency_ns / truth.issue_latency_ns, 1, 0.10);
  EXPECT_NEAR(p.t0_ns_per_byte / truth.t0_ns_per_byte, 1, 0.03);
  EXPECT_LT(p.fit_rel_error_median, 0.04);
}

// Rows whose stalls start within a few bursts of a sustained overload (Q well below C):
// the fit finds the backlog limit.
TEST(BurstGapFit, FindsTheBacklogLimitWhenTheDataShowIt) {
  auto truth = bg::example_params("peer");
  truth.drain_per_sm_GBps.reset();
  truth.backlog_limit_bytes = 256 * 1024;
  const auto issue = synthetic_issue_rows(truth, 7);
  std::vector<std::string> notes;
  const auto p = bg::fit_group(issue, bg::FitTarget::mean, &notes);
  ASSERT_TRUE(p.backlog_limit_bytes.has_value()) << notes.front();
  // Q only sets how many clean bursts a row runs before its stall, which few rows of the
  // grid resolve: within a factor of three, and far below C.
  EXPECT_GT(*p.backlog_limit_bytes, *truth.backlog_limit_bytes / 3);
  EXPECT_LT(*p.backlog_limit_bytes, *truth.backlog_limit_bytes * 3);
  EXPECT_NEAR(*p.capacity_bytes_gpu / *truth.capacity_bytes_gpu, 1, 0.10);
  EXPECT_NEAR(p.drain_GBps / truth.drain_GBps, 1, 0.05);
  EXPECT_LT(p.fit_rel_error_median, 0.04);
}

TEST(BurstGapFit, PerSmCapacityIsFoundWhenTheDataShowsIt) {
  auto truth = bg::example_params("peer");
  truth.drain_per_sm_GBps.reset();
  truth.capacity_scope = bg::CapacityScope::sm;
  truth.capacity_bytes_gpu.reset();
  truth.capacity_bytes_per_sm = 24 * 1024;
  bg::SynthGrid grid;
  grid.blocks = {{{16, 33, 66, 99, 132}, {4096, 16384, 32768, 65536, 131072}, {0, 2000, 10000, 20000, 40000}}};
  const auto rows = bg::synthesize_sweep(truth, grid, 0.02, 5);
  std::vector<xstage::SweepRow> issue;
  for (const auto& r : rows)
    if (r.mode == "issue") issue.push_back(r);
  const auto p = bg::fit_group(issue);
  EXPECT_EQ(p.capacity_scope, bg::CapacityScope::sm);
  ASSERT_TRUE(p.capacity_bytes_per_sm.has_value());
  EXPECT_NEAR(*p.capacity_bytes_per_sm / *truth.capacity_bytes_per_sm, 1, 0.10);
  EXPECT_FALSE(p.capacity_bytes_gpu.has_value());
}

TEST(BurstGapFit, ASweepThatNeverStallsOnlyBoundsDrainAndCapacity) {
  const auto truth = bg::example_params("peer");
  // Small bursts with long gaps: every burst drains before the next one.
  bg::SynthGrid grid;
  grid.blocks = {{{33, 66, 132}, {1024, 2048, 4096, 8192}, {10000, 15000, 20000}}};
  grid.visible_rows = false;
  const auto rows = bg::synthesize_sweep(truth, grid, 0.02, 3);
  for (const auto& r : rows) ASSERT_EQ(bg::clean_bursts(truth, r.sms, r.burst_bytes, bg::probe_gap_ns(truth, r.gap_ns)), -1);
  std::vector<std::string> notes;
  const auto p = bg::fit_group(rows, bg::FitTarget::mean, &notes);
  EXPECT_EQ(p.drain_bound, bg::Bound::lower);
  EXPECT_EQ(p.capacity_bound, bg::Bound::lower);
  EXPECT_NEAR(p.t0_ns_per_byte / truth.t0_ns_per_byte, 1, 0.05);
  EXPECT_LT(p.fit_rel_error_median, 0.03);
  // The bounds stay consistent with the data: every row is still predicted clean (within noise).
  for (const auto& r : rows)
    EXPECT_NEAR(bg::predict_row_issue_ns(p, r, bg::FitTarget::mean) / r.issue_ns_mean, 1, 0.08)
        << r.sms << " SMs x " << r.burst_bytes << " B, gap " << r.gap_ns;
}

TEST(BurstGapFit, WindowStatisticMatchesTheSimulation) {
  auto p = bg::example_params("peer");
  for (std::optional<double> q : {std::optional<double>{}, std::optional<double>{0.0}, std::optional<double>{65536.0},
                                   std::optional<double>{1 << 20}})
  for (int n : {8, 66, 132})
    for (double b : {4096.0, 16384.0, 65536.0})
      for (double g : {0.0, 1000.0, 5000.0, 20000.0}) {
        p.backlog_limit_bytes = q;
        const auto s = bg::simulate_schedule(p, n, b, g, 8 + 48);
        std::vector<double> t;
        double sum = 0;
        for (int k = 8; k < 56; ++k) {
          t.push_back(s[k].issue_ns);
          sum += s[k].issue_ns;
        }
        std::sort(t.begin(), t.end());
        const double tol = 1e-6 * t.back();
        EXPECT_NEAR(bg::window_issue_ns(p, n, b, g, 8, 48, bg::FitTarget::mean), sum / 48, tol) << n << " " << b << " " << g;
        EXPECT_NEAR(bg::window_issue_ns(p, n, b, g, 8, 48, bg::FitTarget::median), 0.5 * (t[23] + t[24]), tol)
            << n << " " << b << " " << g;
      }
}

TEST(BurstGapFit, FitGroupRejectsTooFewRows) {
  auto rows = bg::synthesize_sweep(bg::example_params("peer"), bg::SynthGrid{}, 0, 1);
  rows.resize(3);
  EXPECT_NE(error_of([&] { bg::fit_group(rows); }).find("too few"), std::string::npos);
}

TEST(BurstGapFit, HoldoutSplitIsDeterministicAndOrderIndependent) {
  std::vector<xstage::SweepRow> rows;
  for (const char* pattern : {"local", "peer"}) {
    auto part = bg::synthesize_sweep(bg::example_params(pattern), bg::SynthGrid{}, 0.03, 2);
    rows.insert(rows.end(), part.begin(), part.end());
  }
  const auto a = bg::holdout_mask(rows, 0.3, 42);
  EXPECT_EQ(a, bg::holdout_mask(rows, 0.3, 42));
  EXPECT_NE(a, bg::holdout_mask(rows, 0.3, 43));
  auto held_keys = [](const std::vector<xstage::SweepRow>& rs, const std::vector<bool>& m) {
    std::vector<std::string> k;
    for (std::size_t i = 0; i < rs.size(); ++i)
      if (m[i]) k.push_back(fmt::format("{}/{}/{}/{}/{}", rs[i].pattern, rs[i].mode, rs[i].sms, rs[i].burst_bytes, rs[i].gap_ns));
    std::sort(k.begin(), k.end());
    return k;
  };
  auto shuffled = rows;
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(5));
  EXPECT_EQ(held_keys(rows, a), held_keys(shuffled, bg::holdout_mask(shuffled, 0.3, 42)));
  // About 30% of each group.
  std::size_t peer_rows = 0, peer_held = 0;
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (rows[i].pattern == "peer") {
      ++peer_rows;
      peer_held += a[i];
    }
  EXPECT_NEAR(static_cast<double>(peer_held) / peer_rows, 0.3, 0.01);
  EXPECT_THROW(bg::holdout_mask(rows, 1.0, 1), common::Error);
}

TEST(BurstGapFit, SweepFitValidatesOnHeldOutRowsAndMinGaps) {
  std::vector<xstage::SweepRow> rows;
  for (const char* pattern : {"local", "peer", "all_peers"}) {
    auto part = bg::synthesize_sweep(bg::example_params(pattern), bg::SynthGrid{}, 0.03, 9);
    rows.insert(rows.end(), part.begin(), part.end());
  }
  bg::FitOptions opt;
  opt.holdout = 0.3;
  opt.seed = 42;
  const auto res = bg::fit_sweep(rows, opt, "synthetic");
  EXPECT_EQ(res.params.groups.size(), 3u);
  EXPECT_FALSE(res.held_out.empty());
  EXPECT_LT(res.holdout_mdape, 0.05);
  std::size_t scored = 0;
  for (const auto& c : res.min_gaps) scored += c.scored;
  EXPECT_GT(scored, 10u);
  EXPECT_LT(res.min_gap_median_rel_error, 0.10);
  EXPECT_FALSE(res.drains.empty());
  // The report is valid JSON with the headline numbers.
  const auto report = bg::report_to_json(res);
  EXPECT_NE(report.find("\"median_abs_rel_error\""), std::string::npos);
  EXPECT_NE(report.find("\"min_gap\""), std::string::npos);
}

TEST(BurstGapFit, ASweepWithoutTheTargetColumnIsRefusedNotFittedOnAnother) {
  auto rows = bg::synthesize_sweep(bg::example_params("peer"), bg::SynthGrid{}, 0.03, 5);
  auto no_mean = rows;
  for (auto& r : no_mean) r.issue_ns_mean = -1;  // an older sweep: no issue_ns_mean column
  const std::string all = error_of([&] { bg::fit_sweep(no_mean, {}, "old.csv"); });
  EXPECT_NE(all.find("old.csv: no column issue_ns_mean, the fit target"), std::string::npos) << all;
  EXPECT_NE(all.find("--target median"), std::string::npos) << all;
  auto some = rows;
  some[3].issue_ns_mean = -1;
  const std::string one = error_of([&] { bg::fit_sweep(some, {}, "mixed.csv"); });
  EXPECT_NE(one.find("mixed.csv: row 4: issue_ns_mean, the fit target, is not measured"), std::string::npos) << one;
  bg::FitOptions median;
  median.target = bg::FitTarget::median;
  EXPECT_EQ(error_of([&] { bg::fit_sweep(no_mean, median, "old.csv"); }), "") << "the median is measured";
}

// The fit's cost follows the distinct configurations: a sweep that repeats its grid ten
// times fits to the same parameters in about the time of one pass (it took ten times as
// long when every row was a model evaluation).
TEST(BurstGapFit, CostGrowsWithConfigurationsNotRepeatedRows) {
  const auto once = bg::synthesize_sweep(bg::example_params("peer"), bg::SynthGrid{}, 0.03, 7);
  std::vector<xstage::SweepRow> ten;
  for (int k = 0; k < 10; ++k) ten.insert(ten.end(), once.begin(), once.end());
  auto seconds = [](const std::vector<xstage::SweepRow>& rows, bg::FitResult& out) {
    const auto t0 = std::chrono::steady_clock::now();
    out = bg::fit_sweep(rows, {}, "synthetic");
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  bg::FitResult r1, r10;
  const double t1 = seconds(once, r1), t10 = seconds(ten, r10);
  EXPECT_LT(t10, 3 * t1 + 0.5) << "1x: " << t1 << " s, 10x: " << t10 << " s";
  ASSERT_EQ(r1.params.groups.size(), 1u);
  ASSERT_EQ(r10.params.groups.size(), 1u);
  const auto &a = r1.params.groups[0], &b = r10.params.groups[0];
  EXPECT_NEAR(b.t0_ns_per_byte / a.t0_ns_per_byte, 1, 1e-3);
  EXPECT_NEAR(b.drain_GBps / a.drain_GBps, 1, 1e-3);
  EXPECT_EQ(b.n_rows, 10 * a.n_rows);
}

// ---------------------------------------------------------------- params file

TEST(BurstGapParams, JsonRoundTrip) {
  bg::Params ps;
  ps.source_csv = "sweep.csv";
  ps.holdout_fraction = 0.3;
  ps.seed = 42;
  ps.groups.push_back(peer());
  ps.groups[0].issue_floor_ns = 230;
  ps.groups[0].issue_buffer_bytes = 10240;
  ps.groups[0].backlog_limit_bytes = 0;
  auto all = bg::example_params("all_peers");
  all.capacity_bound = bg::Bound::lower;
  ps.groups.push_back(all);
  const auto back = bg::params_from_json(bg::params_to_json(ps), "mem");
  ASSERT_EQ(back.groups.size(), 2u);
  EXPECT_EQ(back.seed, 42u);
  EXPECT_EQ(back.target, bg::FitTarget::mean);
  EXPECT_DOUBLE_EQ(back.groups[0].t0_ns_per_byte, 0.02);
  EXPECT_FALSE(back.groups[0].drain_per_sm_GBps.has_value());
  EXPECT_DOUBLE_EQ(*back.groups[0].issue_floor_ns, 230);
  EXPECT_FALSE(back.groups[1].issue_floor_ns.has_value());
  EXPECT_DOUBLE_EQ(*back.groups[0].issue_buffer_bytes, 10240);
  EXPECT_FALSE(back.groups[1].issue_buffer_bytes.has_value());
  EXPECT_DOUBLE_EQ(*back.groups[0].backlog_limit_bytes, 0);
  EXPECT_FALSE(back.groups[1].backlog_limit_bytes.has_value());
  // A file fitted before the floor and the buffer existed has no keys for them: neither.
  auto j = nlohmann::json::parse(bg::params_to_json(ps));
  for (auto& g : j["groups"]) {
    g.erase("issue_floor_ns");
    g.erase("issue_buffer_bytes");
    g.erase("backlog_limit_bytes");
  }
  const auto old = bg::params_from_json(j.dump(), "old.json");
  EXPECT_FALSE(old.groups[0].issue_floor_ns.has_value());
  EXPECT_FALSE(old.groups[0].issue_buffer_bytes.has_value());
  EXPECT_FALSE(old.groups[0].backlog_limit_bytes.has_value());
  EXPECT_EQ(back.groups[1].capacity_scope, bg::CapacityScope::both);
  EXPECT_DOUBLE_EQ(*back.groups[1].capacity_bytes_per_sm, 96 * 1024);
  EXPECT_EQ(back.groups[1].capacity_bound, bg::Bound::lower);
  EXPECT_EQ(&back.find("all_peers", "st16"), &back.groups[1]);
  EXPECT_NE(error_of([&] { back.find("local", "st16"); }).find("no fitted group"), std::string::npos);
}

TEST(BurstGapParams, AnExchangeIsAdvisedByTheFitClosestToItsRankCount) {
  bg::Params ps;
  auto group = [](const char* pattern, const char* store, int gpus, double drain) {
    bg::ModelParams g = peer();
    g.pattern = pattern;
    g.store = store;
    g.gpus = gpus;
    g.drain_GBps = drain;  // tells the groups apart
    return g;
  };
  ps.groups = {group("peer", "st16", 2, 1), group("peer", "tma", 4, 2), group("peer", "st16", 4, 3),
               group("all_peers", "st16", 4, 4), group("local", "st16", 2, 5)};
  EXPECT_EQ(ps.for_exchange(1).drain_GBps, 1) << "nothing fitted on <= 1 GPU: the fewest";
  EXPECT_EQ(ps.for_exchange(2).drain_GBps, 1) << "two ranks: one peer";
  EXPECT_EQ(ps.for_exchange(3).drain_GBps, 1) << "no all_peers fit on <= 3 GPUs: peer on the most GPUs <= 3 (two)";
  EXPECT_EQ(ps.for_exchange(4).drain_GBps, 4) << "every rank stores to three others";
  EXPECT_EQ(ps.for_exchange(8).drain_GBps, 4) << "the all_peers fit on the most GPUs <= 8";
  bg::Params only_x4;
  only_x4.groups = {group("peer", "st16", 4, 3)};
  EXPECT_EQ(only_x4.for_exchange(2).drain_GBps, 3) << "the only peer/st16 there is";
  bg::Params none;
  none.source_csv = "s.csv";
  none.groups = {group("local", "st16", 2, 5)};
  EXPECT_NE(error_of([&] { none.for_exchange(4); }).find("no fitted group for pattern 'peer', store 'st16'"),
            std::string::npos);
}

TEST(BurstGapParams, TheShippedFitsLoadTogether) {
  const char* src = std::getenv("XSTAGE_SOURCE_DIR");
  ASSERT_NE(src, nullptr) << "run through ctest (XSTAGE_SOURCE_DIR)";
  const bg::Params shipped = bg::read_params_or_default("");
  EXPECT_EQ(shipped.for_exchange(2).gpus, 2);
  EXPECT_EQ(shipped.for_exchange(2).pattern, "peer");
  EXPECT_EQ(shipped.for_exchange(4).gpus, 4);
  EXPECT_EQ(shipped.for_exchange(4).pattern, "all_peers");
  // The four-GPU file is the fit of the committed four-GPU sweep (xstage/data/README.md).
  const bg::Params x4 = bg::read_params(fs::path(src) / "xstage/data/h200x4_params.json");
  EXPECT_EQ(x4.source_csv, "xstage/data/h200x4_sweep.csv");
  EXPECT_EQ(x4.find("all_peers", "st16").drain_GBps, shipped.for_exchange(4).drain_GBps);
  // A given file is read alone.
  const bg::Params given = bg::read_params_or_default((fs::path(src) / "xstage/data/h200_params.json").string());
  for (const auto& g : given.groups) EXPECT_EQ(g.gpus, 2);
}

TEST(BurstGapParams, StrictReaderNamesTheFieldAndTheFile) {
  bg::Params ps;
  ps.source_csv = "sweep.csv";
  ps.groups.push_back(peer());
  const std::string good = bg::params_to_json(ps);
  auto without = [&](const std::string& field) {
    auto j = nlohmann::json::parse(good);
    if (!j.erase(field)) j["groups"][0].erase(field);
    return j.dump();
  };
  for (const char* field : {"drain_GBps", "t0_ns_per_byte", "capacity_scope", "version", "groups", "loop_overhead_ns"}) {
    const std::string msg = error_of([&] { bg::params_from_json(without(field), "p.json"); });
    EXPECT_NE(msg.find("p.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find(field), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
  }
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  EXPECT_NE(error_of([&] { bg::params_from_json(replaced("\"n_rows\"", "\"n_rowz\""), "p.json"); }).find("n_row"),
            std::string::npos);
  EXPECT_THROW(bg::params_from_json(replaced("\"gpu\"", "\"rack\""), "p.json"), common::Error);
  EXPECT_THROW(bg::params_from_json(replaced("\"drain_GBps\": 350", "\"drain_GBps\": -1"), "p.json"), common::Error);
  EXPECT_THROW(bg::params_from_json(replaced("\"drain_GBps\": 350", "\"drain_GBps\": \"fast\""), "p.json"),
               common::Error);
  EXPECT_THROW(bg::params_from_json("{ not json", "p.json"), common::Error);
  EXPECT_THROW(bg::params_from_json("[]", "p.json"), common::Error);
  EXPECT_THROW(bg::read_params("/nonexistent/params.json"), common::Error);
  // A scope of "gpu" needs capacity_bytes_gpu, not null.
  auto nulled = good;
  const auto at = nulled.find("\"capacity_bytes_gpu\": ");
  nulled.replace(at, nulled.find(',', at) - at, "\"capacity_bytes_gpu\": null");
  EXPECT_NE(error_of([&] { bg::params_from_json(nulled, "p.json"); }).find("capacity_bytes_gpu"), std::string::npos);
}

TEST(BurstGapParams, AbsurdOrNonFiniteValuesAreRefusedWhenRead) {
  bg::Params ps;
  ps.source_csv = "sweep.csv";
  ps.groups.push_back(peer());
  const std::string good = bg::params_to_json(ps);
  auto with = [&](const std::string& field, const std::string& value) {
    std::string s = good;
    const auto at = s.find("\"" + field + "\": ");
    s.replace(at, s.find_first_of(",\n", at) - at, "\"" + field + "\": " + value);
    return s;
  };
  // t0 = 1e308 used to predict "inf ms" and advise a gap of "-nan ns".
  const std::string t0 = error_of([&] { bg::params_from_json(with("t0_ns_per_byte", "1e308"), "p.json"); });
  EXPECT_NE(t0.find("p.json: groups[0]: field 't0_ns_per_byte': 1e+308 ns/B is out of range"), std::string::npos) << t0;
  const std::string inf = error_of([&] { bg::params_from_json(with("drain_GBps", "1e999"), "p.json"); });
  EXPECT_NE(inf.find("p.json: not valid JSON"), std::string::npos) << inf;
  const std::string tiny = error_of([&] { bg::params_from_json(with("capacity_bytes_gpu", "1e-300"), "p.json"); });
  EXPECT_NE(tiny.find("capacity_bytes_gpu"), std::string::npos) << tiny;
  EXPECT_NE(tiny.find(" B is out of range"), std::string::npos) << tiny;
  const std::string lat = error_of([&] { bg::params_from_json(with("issue_latency_ns", "1e30"), "p.json"); });
  EXPECT_NE(lat.find("1e+30 ns is out of range"), std::string::npos) << lat;
  // Whatever reads predicts finite times.
  const auto p = bg::params_from_json(good, "p.json");
  const auto pr = bg::predict(p.groups[0], 132, 16384, 2000, 8);
  EXPECT_TRUE(std::isfinite(pr.steady_issue_ns));
}

// ---------------------------------------------------------------- advisor

TEST(BurstGapAdvice, PicksTheRemedyThatFixesTheCause) {
  const auto p = peer();
  bg::BurstProfile prof;
  prof.sms = 132;
  prof.bytes_per_burst = 16384;
  prof.bursts = 20;

  prof.compute_ns_between_bursts = 10000;  // Delta drains within the gap
  auto a = bg::advise(p, prof);
  EXPECT_EQ(a.remedy, bg::Remedy::none);
  EXPECT_EQ(a.predicted_stall_ns, 0);
  EXPECT_EQ(a.backpressure_after_bursts, -1);
  EXPECT_EQ(a.stall_ns_per_burst.size(), 20u);

  prof.compute_ns_between_bursts = 2000;  // accumulates: lengthen the gap
  a = bg::advise(p, prof);
  EXPECT_EQ(a.remedy, bg::Remedy::lengthen_gap);
  EXPECT_GT(a.predicted_stall_ns, 0);
  EXPECT_EQ(a.backpressure_after_bursts, bg::clean_bursts(p, 132, 16384, 2000));
  EXPECT_DOUBLE_EQ(a.recommended_gap_ns, bg::min_gap_ns(p, 132, 16384));
  EXPECT_FALSE(a.reason.empty());
  prof.compute_ns_between_bursts = a.recommended_gap_ns * 1.001;
  EXPECT_EQ(bg::advise(p, prof).remedy, bg::Remedy::none);

  prof.bytes_per_burst = 65536;  // one burst overflows 4 MiB: split it
  prof.compute_ns_between_bursts = 40000;
  a = bg::advise(p, prof);
  EXPECT_EQ(a.remedy, bg::Remedy::split_burst);
  EXPECT_GE(a.recommended_split, 2);
  EXPECT_EQ(a.min_gap_ns, kInf);
  const double piece = std::ceil(65536.0 / a.recommended_split);
  EXPECT_EQ(bg::clean_bursts(p, 132, piece, a.recommended_gap_ns), -1);

  // Drain limited to 20 GB/s per SM: 8 SMs drain 160 GB/s, each burst adds 0.6 W =
  // 315 KB and a 1 us gap drains 166 KB; more SMs drain more per gap.
  auto limited = p;
  limited.drain_per_sm_GBps = 20;
  prof.sms = 8;
  prof.bytes_per_burst = 65536;
  prof.compute_ns_between_bursts = 1000;
  prof.bursts = 100;  // the 4 MiB fill after 27 bursts
  a = bg::advise(limited, prof);
  EXPECT_EQ(a.remedy, bg::Remedy::spread_over_more_sms);
  // The fewest SMs (same total bytes) that stay clean for the profile's 100 bursts.
  const int m = a.recommended_sms;
  const double w = 8 * 65536.0;
  const int k = bg::clean_bursts(limited, m, std::ceil(w / m), 1000);
  EXPECT_TRUE(k < 0 || k >= 100) << m;
  const int k1 = bg::clean_bursts(limited, m - 1, std::ceil(w / (m - 1)), 1000);
  EXPECT_TRUE(k1 >= 0 && k1 < 100) << m - 1;

  prof.sms = 0;
  EXPECT_THROW(bg::advise(p, prof), common::Error);
}

// A stage that holds the SMs' reads adds its bytes at the drain rate to the compute.
TEST(BurstGapAdvice, ReadBlockedDrainIsTheBytesAtTheDrainRate) {
  bg::ModelParams m;
  m.drain_GBps = 61;
  EXPECT_DOUBLE_EQ(bg::read_blocked_drain_ns(m, 6.1e6), 1e5);
  EXPECT_DOUBLE_EQ(bg::read_blocked_drain_ns(m, 0), 0);
  EXPECT_THROW(bg::read_blocked_drain_ns(m, -1), common::Error);
  m.drain_GBps = 0;
  EXPECT_THROW(bg::read_blocked_drain_ns(m, 1), common::Error);
}

TEST(BurstGapAdvice, PrintConfigPrintsEachProfileOnce) {
  ::setenv("XSTAGE_PRINT_CONFIG", "1", 1);
  bg::BurstProfile prof;
  prof.bytes_per_burst = 12345;
  prof.compute_ns_between_bursts = 777;
  testing::internal::CaptureStderr();
  bg::advise(peer(), prof);
  bg::advise(peer(), prof);
  const std::string err = testing::internal::GetCapturedStderr();
  ::unsetenv("XSTAGE_PRINT_CONFIG");
  EXPECT_NE(err.find("burst-gap advice"), std::string::npos);
  EXPECT_EQ(err.find("burst-gap advice"), err.rfind("burst-gap advice")) << err;
}

TEST(BurstGapPredict, PredictionReportsEverything) {
  const auto pr = bg::predict(peer(), 132, 16384, 2000, 8);
  EXPECT_EQ(pr.bursts.size(), 8u);
  EXPECT_EQ(pr.clean_bursts, bg::clean_bursts(peer(), 132, 16384, 2000));
  const std::string text = bg::format_prediction(pr);
  EXPECT_NE(text.find("smallest gap that avoids it"), std::string::npos);
  EXPECT_NE(text.find("backpressure: yes"), std::string::npos);
  EXPECT_NE(bg::prediction_to_json(pr).find("\"min_gap_ns\""), std::string::npos);
  const auto over = bg::predict(peer(), 132, 65536, 2000, 3);
  EXPECT_NE(bg::format_prediction(over).find("no gap avoids it"), std::string::npos);
  EXPECT_THROW(bg::predict(peer(), 0, 16384, 0, 3), common::Error);
}

// ---------------------------------------------------------------- plots

TEST(BurstGapPlots, WritesTheThreePngs) {
  if (!common::plot::charts_available()) GTEST_SKIP() << "this build draws no charts (no PLplot)";
  std::vector<xstage::SweepRow> rows;
  for (const char* pattern : {"local", "peer"}) {
    auto part = bg::synthesize_sweep(bg::example_params(pattern), bg::SynthGrid{}, 0.03, 4);
    rows.insert(rows.end(), part.begin(), part.end());
  }
  const auto res = bg::fit_sweep(rows, bg::FitOptions{.holdout = 0.3}, "synthetic");
  const fs::path dir = fs::temp_directory_path() / "xs_burstgap_plots";
  fs::remove_all(dir);
  bg::plot_issue_vs_burst(rows, &res.params, bg::PlotSelection{}, dir / "a.png");
  bg::plot_drain_vs_sms(rows, &res.params, "st16", dir / "b.png");
  bg::plot_predicted_vs_measured(res.fitted, res.held_out, dir / "c.png");
  for (const char* f : {"a.png", "b.png", "c.png"}) {
    const auto img = common::read_png(dir / f, 3);
    EXPECT_GT(img.width, 500) << f;
  }
  bg::PlotSelection missing;
  missing.sms = 7;
  EXPECT_NE(error_of([&] { bg::plot_issue_vs_burst(rows, nullptr, missing, dir / "x.png"); }).find("have"),
            std::string::npos);
  fs::remove_all(dir);
}
