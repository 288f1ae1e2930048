// The Burst-Gap fluid model: one burst, a gap, a periodic schedule, and the
// closed forms derived from them (docs/xstage-burstgap.md has the derivations).
// Units: bytes, ns, bytes/ns (= GB/s).
#include <algorithm>
#include <cmath>
#include <limits>

#include "common/check.hpp"
#include "xstage/burstgap/burstgap.hpp"

namespace xstage::burstgap {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
// Relative slack for "the stage just reaches C": equality is not a stall.
constexpr double kEdge = 1e-12;

void check_shape(const ModelParams& p, int sms, double burst_bytes) {
  XS_ASSERT(sms >= 1, "sms must be >= 1 (got {})", sms);
  XS_ASSERT(std::isfinite(burst_bytes) && burst_bytes > 0, "burst bytes must be > 0 (got {})", burst_bytes);
  XS_ASSERT(p.t0_ns_per_byte > 0 && p.drain_GBps > 0 && p.issue_latency_ns >= 0,
            "{}/{}: parameters must be positive", p.pattern, p.store);
}
// Clean bursts before one would start its stores on more than Q of backlog: burst j
// starts them on j*net (the stage grows by net per period from empty); +inf without Q.
double backlog_clean_bursts(const ModelParams& p, double net) {
  if (!p.backlog_limit_bytes) return kInf;
  return std::floor(*p.backlog_limit_bytes / net) + 1;
}
}  // namespace

double measured_issue_ns(const SweepRow& row, FitTarget target) {
  return target == FitTarget::mean && row.issue_ns_mean > 0 ? row.issue_ns_mean : row.issue_ns_med;
}

double probe_gap_ns(const ModelParams& p, double requested_gap_ns) { return requested_gap_ns + p.loop_overhead_ns; }

Rates rates(const ModelParams& p, int sms) {
  const double n = sms;
  Rates r;
  r.inject = n / p.t0_ns_per_byte;
  r.drain = p.drain_GBps;
  if (p.drain_per_sm_GBps) r.drain = std::min(r.drain, n * *p.drain_per_sm_GBps);
  switch (p.capacity_scope) {
    case CapacityScope::gpu:
      r.capacity = p.capacity_bytes_gpu.value_or(kInf);
      break;
    case CapacityScope::sm:
      r.capacity = n * p.capacity_bytes_per_sm.value_or(kInf);
      break;
    case CapacityScope::both:
      r.capacity = std::min(p.capacity_bytes_gpu.value_or(kInf), n * p.capacity_bytes_per_sm.value_or(kInf));
      break;
  }
  return r;
}

double latency_ns(const ModelParams& p, double burst_bytes) {
  // The buffer's bytes leave within a0, so they do not add B*t0: a burst that fits it
  // takes a0, a larger one a0 + (B - b)*t0, and the latency goes negative past b.
  const double buffered = std::min(burst_bytes, p.issue_buffer_bytes.value_or(0.0)) * p.t0_ns_per_byte;
  const double a = p.issue_latency_ns - buffered;
  if (!p.issue_floor_ns) return a;
  return std::max(a, *p.issue_floor_ns - burst_bytes * p.t0_ns_per_byte);
}

double free_issue_ns(const ModelParams& p, double burst_bytes) {
  return latency_ns(p, burst_bytes) + burst_bytes * p.t0_ns_per_byte;
}

double burst_increment_bytes(const ModelParams& p, int sms, double burst_bytes) {
  const Rates r = rates(p, sms);
  return (r.inject - r.drain) * burst_bytes * p.t0_ns_per_byte;
}

BurstOutcome issue_burst(const ModelParams& p, int sms, double burst_bytes, double occupancy_start) {
  check_shape(p, sms, burst_bytes);
  const Rates r = rates(p, sms);
  const double tf = burst_bytes * p.t0_ns_per_byte;  // clean issue time of the stores
  const double w = sms * burst_bytes;
  BurstOutcome o;
  o.occupancy_start = occupancy_start;
  // The latency part injects nothing: the stage drains meanwhile. If the stores would
  // still start on more than Q, the burst first waits for the stage to drain to Q.
  const double a = latency_ns(p, burst_bytes);
  const double at_stores = occupancy_start - r.drain * a;
  const double wait = p.backlog_limit_bytes ? std::max(0.0, at_stores - *p.backlog_limit_bytes) / r.drain : 0.0;
  const double q = std::min(std::max(0.0, at_stores - r.drain * wait), r.capacity);
  double t = tf;
  if (r.inject <= r.drain) {
    o.occupancy_end = std::max(0.0, q + (r.inject - r.drain) * tf);
  } else {
    const double t_fill = (r.capacity - q) / (r.inject - r.drain);
    if (t_fill >= tf * (1 - kEdge)) {
      o.occupancy_end = std::min(q + (r.inject - r.drain) * tf, r.capacity);
    } else {
      t = t_fill + (w - r.inject * t_fill) / r.drain;  // the rest issues at the drain rate
      o.occupancy_end = r.capacity;
      o.backpressured = true;
    }
  }
  o.issue_ns = wait + a + t;
  o.overhead_ns = wait + t - tf;
  o.backpressured = o.backpressured || wait > 0;
  o.recovery_ns = o.occupancy_end / r.drain;
  return o;
}

double after_gap(const ModelParams& p, int sms, double occupancy, double gap_ns) {
  return std::max(0.0, occupancy - rates(p, sms).drain * gap_ns);
}

std::vector<BurstOutcome> simulate_schedule(const ModelParams& p, int sms, double burst_bytes, double gap_ns,
                                            int bursts) {
  XS_ASSERT(bursts >= 1, "bursts must be >= 1 (got {})", bursts);
  XS_ASSERT(std::isfinite(gap_ns) && gap_ns >= 0, "gap must be >= 0 ns (got {})", gap_ns);
  std::vector<BurstOutcome> out;
  out.reserve(static_cast<std::size_t>(bursts));
  double q = 0;
  for (int k = 0; k < bursts; ++k) {
    out.push_back(issue_burst(p, sms, burst_bytes, q));
    q = after_gap(p, sms, out.back().occupancy_end, gap_ns);
  }
  return out;
}

double steady_issue_ns(const ModelParams& p, int sms, double burst_bytes, double gap_ns) {
  check_shape(p, sms, burst_bytes);
  const Rates r = rates(p, sms);
  const double tf = burst_bytes * p.t0_ns_per_byte;
  const double a = latency_ns(p, burst_bytes);
  if (r.inject <= r.drain) return a + tf;
  // In the drain-limited steady state the period T + g carries W at rate D;
  // when C < D*(g + a0) every burst starts empty and only the overflow waits.
  const double w = sms * burst_bytes;
  return a + std::max(tf, w / r.drain - std::min(gap_ns + a, r.capacity / r.drain));
}

double min_gap_ns(const ModelParams& p, int sms, double burst_bytes) {
  check_shape(p, sms, burst_bytes);
  const Rates r = rates(p, sms);
  const double delta = burst_increment_bytes(p, sms, burst_bytes);
  if (delta <= 0) return 0;
  if (delta > r.capacity * (1 + kEdge)) return kInf;
  return std::max(0.0, delta / r.drain - latency_ns(p, burst_bytes));
}

int clean_bursts(const ModelParams& p, int sms, double burst_bytes, double gap_ns) {
  check_shape(p, sms, burst_bytes);
  const Rates r = rates(p, sms);
  const double delta = burst_increment_bytes(p, sms, burst_bytes);
  if (delta <= 0) return -1;
  if (delta > r.capacity * (1 + kEdge)) return 0;
  const double net = delta - r.drain * (gap_ns + latency_ns(p, burst_bytes));  // growth per period
  if (net <= 0) return -1;
  const double k = std::min(std::floor((r.capacity - delta) / net) + 1, backlog_clean_bursts(p, net));
  return k > 1e9 ? -1 : static_cast<int>(k);
}

double max_burst_bytes(const ModelParams& p, int sms) {
  const Rates r = rates(p, sms);
  if (r.inject <= r.drain) return kInf;
  return r.capacity / ((r.inject - r.drain) * p.t0_ns_per_byte);
}

double visible_drain_ns(const ModelParams& p, int sms, double burst_bytes) {
  const BurstOutcome o = issue_burst(p, sms, burst_bytes, 0.0);
  return o.issue_ns + o.recovery_ns;
}

SchedulePhases schedule_phases(const ModelParams& p, int sms, double burst_bytes, double gap_ns) {
  SchedulePhases ph;
  ph.free_ns = free_issue_ns(p, burst_bytes);
  ph.steady_ns = steady_issue_ns(p, sms, burst_bytes, gap_ns);
  const Rates r = rates(p, sms);
  const double delta = burst_increment_bytes(p, sms, burst_bytes);
  if (delta <= 0) return ph;
  if (delta > r.capacity * (1 + kEdge)) {  // the first burst overflows from empty
    ph.clean = 0;
    ph.transition_ns = issue_burst(p, sms, burst_bytes, 0.0).issue_ns;
    return ph;
  }
  const double a = latency_ns(p, burst_bytes);
  const double net = delta - r.drain * (gap_ns + a);  // growth per period
  if (net <= 0) return ph;
  const double k = std::floor((r.capacity - delta) / net) + 1;
  const double k_backlog = backlog_clean_bursts(p, net);
  if (std::min(k, k_backlog) > 1e15) return ph;
  if (k_backlog < k) {
    // Burst k would start its stores on k*net: it waits for the part above Q, and each
    // burst after it waits net/D, which is the steady state (W/D - g).
    ph.clean = static_cast<long long>(k_backlog);
    ph.transition_ns = ph.free_ns + (k_backlog * net - *p.backlog_limit_bytes) / r.drain;
    return ph;
  }
  ph.clean = static_cast<long long>(k);
  // Burst k starts issuing at k * net (after its latency) and fills part way.
  const double q = std::min(k * net, r.capacity);
  const double t_fill = (r.capacity - q) / (r.inject - r.drain);
  ph.transition_ns = a + t_fill + (sms * burst_bytes - r.inject * t_fill) / r.drain;
  return ph;
}

double window_issue_ns(const ModelParams& p, int sms, double burst_bytes, double gap_ns, int first, int count,
                       FitTarget stat) {
  XS_ASSERT(first >= 0 && count >= 1, "window of bursts [{}, {}+{}) is empty", first, first, count);
  const SchedulePhases ph = schedule_phases(p, sms, burst_bytes, gap_ns);
  const long long a = first, b = static_cast<long long>(first) + count;  // [a, b)
  const long long clean_end = ph.clean < 0 ? b : std::clamp(ph.clean, a, b);
  const long long n_clean = clean_end - a;
  const long long n_trans = (ph.clean >= a && ph.clean < b) ? 1 : 0;
  const long long n_steady = count - n_clean - n_trans;
  if (stat == FitTarget::mean)
    return (n_clean * ph.free_ns + n_trans * ph.transition_ns + n_steady * ph.steady_ns) / count;
  // Median (mean of the two middle values for an even count), from the three runs.
  std::pair<double, long long> runs[3] = {{ph.free_ns, n_clean}, {ph.transition_ns, n_trans}, {ph.steady_ns, n_steady}};
  std::sort(std::begin(runs), std::end(runs));
  auto at = [&](long long i) {
    for (const auto& [v, n] : runs) {
      if (i < n) return v;
      i -= n;
    }
    return runs[2].first;
  };
  return 0.5 * (at((count - 1) / 2) + at(count / 2));
}

double predict_row_issue_ns(const ModelParams& p, const SweepRow& row, FitTarget stat) {
  return window_issue_ns(p, row.sms, row.burst_bytes, probe_gap_ns(p, row.gap_ns), std::max(0, row.warmup),
                         std::max(1, row.bursts), stat);
}

}  // namespace xstage::burstgap
