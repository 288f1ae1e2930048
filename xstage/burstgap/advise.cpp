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

const char* to_string(Remedy r) {
  switch (r) {
    case Remedy::none: return "none";
    case Remedy::lengthen_gap: return "lengthen_gap";
    case Remedy::split_burst: return "split_burst";
    case Remedy::spread_over_more_sms: return "spread_over_more_sms";
  }
  return "?";
}

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


void check_profile(const BurstProfile& prof) {
  XS_ASSERT(prof.bytes_per_burst > 0, "burst profile: bytes_per_burst must be > 0");
  XS_ASSERT(prof.sms >= 1, "burst profile: sms must be >= 1 (got {})", prof.sms);
  XS_ASSERT(std::isfinite(prof.compute_ns_between_bursts) && prof.compute_ns_between_bursts >= 0,
            "burst profile: compute_ns_between_bursts must be >= 0 (got {})", prof.compute_ns_between_bursts);
  XS_ASSERT(prof.bursts >= 1 && prof.bursts <= kMaxBursts, "burst profile: bursts must be in 1..{} (got {})",
            kMaxBursts, prof.bursts);
}

// The smallest SM count above `n` that issues the same total bytes stall-free, or 0.
int spread_sms(const ModelParams& p, int n, double total_bytes, double gap, long long bursts) {
  for (int m = n + 1; m <= p.sms_max; ++m)
    if (stall_free(p, m, std::ceil(total_bytes / m), gap, bursts)) return m;
  return 0;
}

// What one profile's advice is built from.
struct Case {
  int n;
  double b, g, delta;
  Rates r;
  std::string what, stall_text;
};

std::string no_stall_reason(const ModelParams& p, const BurstProfile& prof, const Case& c, const Advice& a) {
  if (c.delta <= 0) return fmt::format("{}: the drain keeps up with issue, bursts never back up", c.what);
  const int k = clean_bursts(p, c.n, c.b, c.g);
  return k < 0 ? fmt::format("{}: each burst leaves {} that the {} gap drains (needs >= {})", c.what,
                             common::format_bytes(c.delta), common::format_ns(c.g), common::format_ns(a.min_gap_ns))
               : fmt::format("{}: backpressure would start at burst {}, after the profile's {} bursts", c.what, k + 1,
                             prof.bursts);
}

// The stage accumulates over bursts (each adds at most the capacity): the gap is too short.
void advise_accumulating(const ModelParams& p, const BurstProfile& prof, const Case& c, Advice& a) {
  if (const int m = (p.drain_per_sm_GBps ? spread_sms(p, c.n, c.n * c.b, c.g, prof.bursts) : 0)) {
    a.remedy = Remedy::spread_over_more_sms;
    a.recommended_sms = m;
    a.reason = fmt::format("{}: {}; the drain is limited per SM, so issuing from {} SMs drains it within the {} gap",
                           c.what, c.stall_text, m, common::format_ns(c.g));
    return;
  }
  a.remedy = Remedy::lengthen_gap;
  a.recommended_gap_ns = a.min_gap_ns;
  a.reason = fmt::format("{}: {}; each burst adds {} but the {} gap drains only {}; a gap of {} avoids it", c.what,
                         c.stall_text, common::format_bytes(c.delta), common::format_ns(c.g),
                         common::format_bytes(c.r.drain * (c.g + p.issue_latency_ns)), common::format_ns(a.min_gap_ns));
}

// One burst overflows the capacity: split it, with the compute spread between pieces.
void advise_overflowing(const ModelParams& p, const BurstProfile& prof, const Case& c, Advice& a) {
  for (int k = 2; k <= kMaxSplit; ++k) {
    const double piece = std::ceil(c.b / k);
    if (burst_increment_bytes(p, c.n, piece) > c.r.capacity) continue;
    if (stall_free(p, c.n, piece, c.g / k, static_cast<long long>(k) * prof.bursts)) {
      a.remedy = Remedy::split_burst;
      a.recommended_split = k;
      a.recommended_gap_ns = c.g / k;
      a.reason = fmt::format("{}: {}; one burst adds {}, over the capacity; {} pieces of {} with {} of compute "
                             "between them fit",
                             c.what, c.stall_text, common::format_bytes(c.delta), k, common::format_bytes(piece),
                             common::format_ns(c.g / k));
      return;
    }
  }
  if (const int m =
          (p.capacity_scope != CapacityScope::gpu ? spread_sms(p, c.n, c.n * c.b, c.g, prof.bursts) : 0)) {
    a.remedy = Remedy::spread_over_more_sms;
    a.recommended_sms = m;
    a.reason = fmt::format("{}: {}; the capacity is per SM, so {} SMs hold the burst", c.what, c.stall_text, m);
    return;
  }
  // Split to fit the capacity, and lengthen the gap between the pieces.
  const int k = std::min(kMaxSplit, static_cast<int>(std::ceil(c.delta / c.r.capacity)) + 1);
  const double piece = std::ceil(c.b / k);
  a.remedy = Remedy::split_burst;
  a.recommended_split = k;
  a.recommended_gap_ns = min_gap_ns(p, c.n, piece);
  a.reason = fmt::format("{}: {}; one burst adds {}, over the capacity, and no gap helps; split it into {} pieces of "
                         "{} with >= {} of compute between them",
                         c.what, c.stall_text, common::format_bytes(c.delta), k, common::format_bytes(piece),
                         common::format_ns(a.recommended_gap_ns));
}

}  // namespace

Advice advise(const ModelParams& p, const BurstProfile& prof) {
  check_profile(prof);
  Case c;
  c.n = prof.sms;
  c.b = static_cast<double>(prof.bytes_per_burst);
  c.g = prof.compute_ns_between_bursts;
  c.r = rates(p, c.n);
  c.delta = burst_increment_bytes(p, c.n, c.b);

  Advice a;
  const auto sched = simulate_schedule(p, c.n, c.b, c.g, prof.bursts);
  for (std::size_t k = 0; k < sched.size(); ++k) {
    a.stall_ns_per_burst.push_back(sched[k].overhead_ns);
    a.predicted_stall_ns += sched[k].overhead_ns;
    if (a.backpressure_after_bursts < 0 && sched[k].backpressured) a.backpressure_after_bursts = static_cast<int>(k);
  }
  a.min_gap_ns = min_gap_ns(p, c.n, c.b);
  a.max_burst_bytes = max_burst_bytes(p, c.n);
  a.recommended_sms = c.n;
  a.recommended_gap_ns = c.g;
  c.what = fmt::format("{} SMs x {} (R {:.0f} GB/s into D {:.0f} GB/s, C {})", c.n, common::format_bytes(c.b),
                       c.r.inject, c.r.drain,
                       std::isfinite(c.r.capacity) ? common::format_bytes(c.r.capacity) : "unlimited");
  c.stall_text = fmt::format("backpressure from burst {} costs {} in {} bursts", a.backpressure_after_bursts + 1,
                             common::format_ns(a.predicted_stall_ns), prof.bursts);

  if (a.predicted_stall_ns <= 1e-3 * prof.bursts) {
    a.remedy = Remedy::none;
    a.reason = no_stall_reason(p, prof, c, a);
  } else if (c.delta <= c.r.capacity) {
    advise_accumulating(p, prof, c, a);
  } else {
    advise_overflowing(p, prof, c, a);
  }
  print_once(prof, a);
  return a;
}

Advice advise(const Params& params, const BurstProfile& profile) {
  return advise(params.find(profile.pattern, profile.store), profile);
}

double read_blocked_drain_ns(const ModelParams& p, double bytes) {
  XS_ASSERT(bytes >= 0 && p.drain_GBps > 0, "read-blocked drain: bytes {} and drain {} GB/s", bytes, p.drain_GBps);
  return bytes / p.drain_GBps;  // GB/s = bytes per ns
}

}  // namespace xstage::burstgap
