// The Burst-Gap advisor: given a burst profile, predict the stall and pick a remedy.
//
// Which remedy fixes what (Delta = occupancy one clean burst adds, C = capacity,
// D = drain rate, g = compute between bursts, a0 = issue latency):
//   Delta <= D*(g + a0)        the gap drains each burst: nothing to do.
//   D*(g + a0) < Delta <= C    the stage accumulates over bursts. Splitting does not
//                              help (same bytes per unit of compute); a longer gap
//                              (g >= g_min) does, and so do more SMs when the drain is
//                              limited per SM (D grows with N). lengthen_gap, or
//                              spread_over_more_sms when that alone is enough.
//   Delta > C                  one burst overflows even from empty: no gap helps.
//                              Split it into k pieces with the compute spread between
//                              them (each piece adds Delta/k <= C); if the pieces
//                              still accumulate, recommend the per-piece gap too.
//                              Spreading helps when the capacity is per SM.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <set>

#include "common/check.hpp"
#include "common/config_print.hpp"
#include "common/files.hpp"
#include "xstage/burstgap/burstgap.hpp"

namespace xstage::burstgap {

namespace {

constexpr int kMaxSplit = 1024;
constexpr int kMaxBursts = 1'000'000;

// No burst of the first `bursts` stalls (closed form, so long profiles stay cheap).
bool stall_free(const ModelParams& p, int sms, double bytes, double gap, long long bursts) {
  const int k = clean_bursts(p, sms, bytes, gap);
  return k < 0 || k >= bursts;
}

void print_once(const BurstProfile& prof, const Advice& a) {
  const std::string key = fmt::format("{}/{}/{}/{}/{}/{}", prof.pattern, prof.store, prof.sms, prof.bytes_per_burst,
                                      prof.compute_ns_between_bursts, prof.bursts);
  common::print_config_once(key, [&] {
    return fmt::format(
        "xstage: burst-gap advice [{}/{}, {} SMs x {}, gap {}, {} bursts]: stall {} total; remedy {} (split {}, sms "
        "{}, gap {}): {}",
        prof.pattern, prof.store, prof.sms, common::format_bytes(static_cast<double>(prof.bytes_per_burst)),
        common::format_ns(prof.compute_ns_between_bursts), prof.bursts, common::format_ns(a.predicted_stall_ns),
        to_string(a.remedy), a.recommended_split, a.recommended_sms, common::format_ns(a.recommended_gap_ns),
        a.reason);
  });
}

}  // namespace

const char* to_string(Remedy r) {
  switch (r) {
    case Remedy::none: return "none";
    case Remedy::lengthen_gap: return "lengthen_gap";
    case Remedy::split_burst: return "split_burst";
    case Remedy::spread_over_more_sms: return "spread_over_more_sms";
  }
  return "?";
}

Advice advise(const ModelParams& p, const BurstProfile& prof) {
  XS_ASSERT(prof.bytes_per_burst > 0, "burst profile: bytes_per_burst must be > 0");
  XS_ASSERT(prof.sms >= 1, "burst profile: sms must be >= 1 (got {})", prof.sms);
  XS_ASSERT(std::isfinite(prof.compute_ns_between_bursts) && prof.compute_ns_between_bursts >= 0,
            "burst profile: compute_ns_between_bursts must be >= 0 (got {})", prof.compute_ns_between_bursts);
  XS_ASSERT(prof.bursts >= 1 && prof.bursts <= kMaxBursts, "burst profile: bursts must be in 1..{} (got {})",
            kMaxBursts, prof.bursts);
  const int n = prof.sms;
  const double b = static_cast<double>(prof.bytes_per_burst), g = prof.compute_ns_between_bursts;
  const double w = n * b;
  const Rates r = rates(p, n);
  const double delta = burst_increment_bytes(p, n, b);

  Advice a;
  auto done = [&]() {
    print_once(prof, a);
    return a;
  };
  const auto sched = simulate_schedule(p, n, b, g, prof.bursts);
  for (std::size_t k = 0; k < sched.size(); ++k) {
    a.stall_ns_per_burst.push_back(sched[k].overhead_ns);
    a.predicted_stall_ns += sched[k].overhead_ns;
    if (a.backpressure_after_bursts < 0 && sched[k].backpressured) a.backpressure_after_bursts = static_cast<int>(k);
  }
  a.min_gap_ns = min_gap_ns(p, n, b);
  a.max_burst_bytes = max_burst_bytes(p, n);
  a.recommended_sms = n;
  a.recommended_gap_ns = g;
  const std::string what =
      fmt::format("{} SMs x {} (R {:.0f} GB/s into D {:.0f} GB/s, C {})", n, common::format_bytes(b), r.inject, r.drain,
                  std::isfinite(r.capacity) ? common::format_bytes(r.capacity) : "unlimited");

  if (a.predicted_stall_ns <= 1e-3 * prof.bursts) {
    a.remedy = Remedy::none;
    if (delta <= 0) {
      a.reason = fmt::format("{}: the drain keeps up with issue, bursts never back up", what);
    } else {
      const int k = clean_bursts(p, n, b, g);
      a.reason = k < 0 ? fmt::format("{}: each burst leaves {} that the {} gap drains (needs >= {})", what,
                                     common::format_bytes(delta), common::format_ns(g), common::format_ns(a.min_gap_ns))
                       : fmt::format("{}: backpressure would start at burst {}, after the profile's {} bursts", what,
                                     k + 1, prof.bursts);
    }
    return done();
  }

  // More SMs with the same total bytes: the smallest count that is stall-free.
  auto spread = [&]() -> int {
    for (int m = n + 1; m <= p.sms_max; ++m) {
      const double bm = std::ceil(w / m);
      if (stall_free(p, m, bm, g, prof.bursts)) return m;
    }
    return 0;
  };
  const std::string stall_text = fmt::format("backpressure from burst {} costs {} in {} bursts",
                                             a.backpressure_after_bursts + 1, common::format_ns(a.predicted_stall_ns),
                                             prof.bursts);

  if (delta <= r.capacity) {
    // The stage accumulates over bursts: the gap is too short for the drain.
    if (const int m = (p.drain_per_sm_GBps ? spread() : 0)) {
      a.remedy = Remedy::spread_over_more_sms;
      a.recommended_sms = m;
      a.reason = fmt::format("{}: {}; the drain is limited per SM, so issuing from {} SMs drains it within the {} gap",
                             what, stall_text, m, common::format_ns(g));
    } else {
      a.remedy = Remedy::lengthen_gap;
      a.recommended_gap_ns = a.min_gap_ns;
      a.reason = fmt::format("{}: {}; each burst adds {} but the {} gap drains only {}; a gap of {} avoids it", what,
                             stall_text, common::format_bytes(delta), common::format_ns(g),
                             common::format_bytes(r.drain * (g + p.issue_latency_ns)), common::format_ns(a.min_gap_ns));
    }
    return done();
  }

  // One burst overflows the capacity: split it, with the compute spread between pieces.
  for (int k = 2; k <= kMaxSplit; ++k) {
    const double piece = std::ceil(b / k);
    if (burst_increment_bytes(p, n, piece) > r.capacity) continue;
    if (stall_free(p, n, piece, g / k, static_cast<long long>(k) * prof.bursts)) {
      a.remedy = Remedy::split_burst;
      a.recommended_split = k;
      a.recommended_gap_ns = g / k;
      a.reason = fmt::format("{}: {}; one burst adds {}, over the capacity; {} pieces of {} with {} of compute "
                             "between them fit",
                             what, stall_text, common::format_bytes(delta), k, common::format_bytes(piece),
                             common::format_ns(g / k));
      return done();
    }
  }
  if (const int m = (p.capacity_scope != CapacityScope::gpu ? spread() : 0)) {
    a.remedy = Remedy::spread_over_more_sms;
    a.recommended_sms = m;
    a.reason = fmt::format("{}: {}; the capacity is per SM, so {} SMs hold the burst", what, stall_text, m);
    return done();
  }
  // Split to fit the capacity, and lengthen the gap between the pieces.
  const int k = std::min(kMaxSplit, static_cast<int>(std::ceil(delta / r.capacity)) + 1);
  const double piece = std::ceil(b / k);
  a.remedy = Remedy::split_burst;
  a.recommended_split = k;
  a.recommended_gap_ns = min_gap_ns(p, n, piece);
  a.reason = fmt::format("{}: {}; one burst adds {}, over the capacity, and no gap helps; split it into {} pieces of "
                         "{} with >= {} of compute between them",
                         what, stall_text, common::format_bytes(delta), k, common::format_bytes(piece),
                         common::format_ns(a.recommended_gap_ns));
  return done();
}

Advice advise(const Params& params, const BurstProfile& profile) {
  return advise(params.find(profile.pattern, profile.store), profile);
}

double read_blocked_drain_ns(const ModelParams& p, double bytes) {
  XS_ASSERT(bytes >= 0 && p.drain_GBps > 0, "read-blocked drain: bytes {} and drain {} GB/s", bytes, p.drain_GBps);
  return bytes / p.drain_GBps;  // GB/s = bytes per ns
}

}  // namespace xstage::burstgap
