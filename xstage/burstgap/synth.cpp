// Synthetic sweeps drawn from the model itself, for tests and dry runs of the
// fit/plot/demo pipeline before a measured sweep exists. Never a measurement:
// the CLI writes them under a "# SYNTHETIC" header line.
#include <cmath>
#include <random>

#include "common/check.hpp"
#include "xstage/burstgap/burstgap.hpp"

namespace xstage::burstgap {

namespace {

// Box-Muller on mt19937_64 (std::normal_distribution differs between libraries;
// this keeps synthetic sweeps identical everywhere for a given seed).
double normal(std::mt19937_64& rng) {
  constexpr double kTwoPi = 6.283185307179586;
  const double u1 = (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53;
  const double u2 = (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
}

}  // namespace

ModelParams example_params(const std::string& pattern, int gpus) {
  XS_ASSERT(is_valid_pattern(pattern), "unknown pattern '{}'", pattern);
  // Invented, H200-like magnitudes: ~50 GB/s of stores per SM, NVLink-class peer
  // drain, HBM-class local drain, a few MiB of outstanding capacity.
  ModelParams p;
  p.pattern = pattern;
  p.store = "st16";
  p.gpus = gpus;
  p.t0_ns_per_byte = 0.02;
  p.issue_latency_ns = 40;
  p.loop_overhead_ns = 400;
  if (pattern == "peer") {
    p.drain_GBps = 350;
    p.drain_per_sm_GBps = 20;
    p.capacity_bytes_gpu = 4.0 * 1024 * 1024;
  } else if (pattern == "all_peers") {
    p.drain_GBps = 600;
    p.capacity_scope = CapacityScope::both;
    p.capacity_bytes_gpu = 8.0 * 1024 * 1024;
    p.capacity_bytes_per_sm = 96.0 * 1024;
  } else {
    p.issue_latency_ns = 30;
    p.drain_GBps = 2800;
    p.capacity_bytes_gpu = 6.0 * 1024 * 1024;
  }
  return p;
}

std::vector<SweepRow> synthesize_sweep(const ModelParams& truth, const SynthGrid& grid, double noise,
                                       std::uint64_t seed) {
  XS_ASSERT(noise >= 0 && noise < 1, "noise must be in [0, 1) (got {})", noise);
  std::mt19937_64 rng(seed);
  std::vector<SweepRow> rows;
  auto base = [&](int sms, double bytes, double gap, const char* mode) {
    SweepRow r;
    r.gpus = truth.gpus;
    r.pattern = truth.pattern;
    r.store = truth.store;
    r.mode = mode;
    r.sms = sms;
    r.burst_bytes = bytes;
    r.gap_ns = gap;
    r.bursts = grid.bursts;
    r.warmup = grid.warmup;
    return r;
  };
  for (const auto& block : grid.blocks)
    for (int sms : block.sms)
      for (double bytes : block.burst_bytes)
        for (double gap : block.gaps_ns) {
          SweepRow r = base(sms, bytes, gap, "issue");
          const double g = probe_gap_ns(truth, gap);
          const double clean = predict_row_issue_ns(truth, r, FitTarget::mean);
          const double t = clean * std::exp(noise * normal(rng));
          // Stalled SMs are served unevenly: the median sits a little below the mean.
          const bool stalled = clean > 1.1 * free_issue_ns(truth, bytes);
          r.issue_ns_mean = t;
          r.issue_ns_med = predict_row_issue_ns(truth, r, FitTarget::median) * (stalled ? 0.95 : 1.0) *
                           std::exp(noise * normal(rng));
          r.issue_ns_p10 = r.issue_ns_med * std::exp(-1.28 * noise);
          r.issue_ns_p90 = r.issue_ns_med * std::exp(1.28 * noise);
          r.period_ns_mean = t + g;
          r.period_ns_med = r.issue_ns_med + g;
          r.gbps = sms * bytes / r.period_ns_mean;
          rows.push_back(r);
        }
  if (grid.visible_rows) {
    // Visible mode: each burst starts from an empty stage and ends with a fence and a
    // flag; the synthetic flag and fence add fixed latencies the model does not have.
    for (double gap : {0.0, 10000.0})
      for (double bytes : {4096.0, 16384.0, 65536.0}) {
        const int sms = 132;
        SweepRow r = base(sms, bytes, gap, "visible");
        const BurstOutcome o = issue_burst(truth, sms, bytes, 0.0);
        r.issue_ns_med = o.issue_ns * std::exp(noise * normal(rng));
        r.issue_ns_mean = r.issue_ns_med;
        r.issue_ns_p10 = r.issue_ns_med * std::exp(-1.28 * noise);
        r.issue_ns_p90 = r.issue_ns_med * std::exp(1.28 * noise);
        const double drain = visible_drain_ns(truth, sms, bytes) * std::exp(noise * normal(rng));
        r.drain_ns_med = drain + 700;
        r.visible_ns_med = drain + 1500;
        r.visible_ns_p10 = r.visible_ns_med * std::exp(-1.28 * noise);
        r.visible_ns_p90 = r.visible_ns_med * std::exp(1.28 * noise);
        r.period_ns_med = r.drain_ns_med + probe_gap_ns(truth, gap);
        r.period_ns_mean = r.period_ns_med;
        r.gbps = sms * bytes / r.period_ns_med;
        rows.push_back(r);
      }
  }
  return rows;
}

}  // namespace xstage::burstgap
