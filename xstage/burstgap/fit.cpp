// Fitting one (pattern, store, gpus) group of issue-mode sweep rows.
//
//  0. The probe loop's own time per burst, h = median(period - issue - gap) over the
//     rows (means when present), is measured, not fitted: the model gap of a row
//     is gap_ns + h. A row's model value is the mean (or median) issue time of
//     its measured bursts, warmup .. warmup+bursts-1 of a schedule from an empty
//     stage (window_issue_ns), fitted to the row's mean (or median).
//  1. Initial values, each from the rows that show it directly:
//       t0, a0  the lower envelope of issue time vs burst bytes (min over SMs and
//               gaps for each burst size), a relative least-squares line a0 + t0*B
//               with rows far above it trimmed;
//       D       W / (T + g) of drain-limited rows (T > 1.5x free): in the sustained
//               state the period T + g carries W at rate D; d_sm from the rows
//               well below D_gpu, per SM;
//       C       W - D*(T - a0) of rows in the capacity regime (each burst starts
//               empty, only the overflow waits).
//  2. Joint refinement: Nelder-Mead on the log parameters minimising the sum of
//     squared log ratios of steady-state predicted vs measured issue time, for
//     each structural variant: per-SM drain limit on/off x capacity none / per GPU
//     / per SM / both, and for the shape of the free issue time: a0 + B*t0, with the
//     floor L, or with the buffer b. The variant with the lowest BIC wins
//     (n ln(SSE/n) + k ln n), so a limit the data does not support costs more than it
//     explains.
//  3. Clean-up: a per-SM limit that binds at no SM count of the data is dropped;
//     "both" collapses to the one that binds over the data's SM range; a capacity
//     (or drain) the data is insensitive to is reported as a lower bound: the
//     smallest value whose fit the data cannot tell from unlimited.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "common/check.hpp"
#include "common/files.hpp"
#include "common/progress.hpp"
#include "common/stats.hpp"
#include "xstage/burstgap/nelder_mead.hpp"
#include "xstage/burstgap/burstgap.hpp"

namespace xstage::burstgap {

namespace {

constexpr double kUnlimited = 1e26;   // "no limit": far above any byte count or rate
constexpr double kLogClamp = 60.0;    // exp(60) ~ 1e26
constexpr double kStallRatio = 1.5;   // "clearly backpressured": issue time > 1.5x free
constexpr double kSseFloor = 1e-8;    // per row: 0.01% relative error, so noise-free data
                                      // does not make BIC favour needless parameters

struct Obs {
  int sms;
  double bytes, gap, issue;  // gap: the model gap (requested + loop time)
  int first, count;          // the measured bursts: [warmup, warmup + bursts)
  FitTarget stat;
};

struct Variant {
  bool drain_per_sm = false;
  bool capacity = true;
  CapacityScope scope = CapacityScope::gpu;
  bool floor = false;    // the issue-time floor L
  bool buffer = false;   // the issue buffer b
  bool backlog = false;  // the backlog limit Q
  int k() const {
    return 3 + (drain_per_sm ? 1 : 0) + (!capacity ? 0 : scope == CapacityScope::both ? 2 : 1) + (floor ? 1 : 0) +
           (buffer ? 1 : 0) + (backlog ? 1 : 0);
  }
  std::string name() const {
    std::string s = capacity ? fmt::format("capacity {}", to_string(scope)) : "no capacity limit";
    return s + (drain_per_sm ? " + per-SM drain" : "") + (floor ? " + issue floor" : "") +
           (buffer ? " + issue buffer" : "") + (backlog ? " + backlog limit" : "");
  }
};

struct Init {
  double t0, a0, d, dsm, c, csm, floor, buffer;
};

double ex(double x) { return std::exp(std::clamp(x, -kLogClamp, kLogClamp)); }

ModelParams apply(const ModelParams& base, const Variant& v, std::span<const double> x) {
  ModelParams p = base;
  std::size_t i = 0;
  p.t0_ns_per_byte = ex(x[i++]);
  p.issue_latency_ns = ex(x[i++]);
  p.drain_GBps = ex(x[i++]);
  p.drain_per_sm_GBps = std::nullopt;
  if (v.drain_per_sm) p.drain_per_sm_GBps = ex(x[i++]);
  p.capacity_scope = v.capacity ? v.scope : CapacityScope::gpu;
  p.capacity_bytes_gpu = std::nullopt;
  p.capacity_bytes_per_sm = std::nullopt;
  if (!v.capacity) {
    p.capacity_bytes_gpu = kUnlimited;
  } else {
    if (v.scope != CapacityScope::sm) p.capacity_bytes_gpu = ex(x[i++]);
    if (v.scope != CapacityScope::gpu) p.capacity_bytes_per_sm = ex(x[i++]);
  }
  p.issue_floor_ns = std::nullopt;
  if (v.floor) p.issue_floor_ns = ex(x[i++]);
  p.issue_buffer_bytes = std::nullopt;
  if (v.buffer) p.issue_buffer_bytes = ex(x[i++]);
  p.backlog_limit_bytes = std::nullopt;
  if (v.backlog) p.backlog_limit_bytes = ex(x[i++]);
  return p;
}

std::vector<double> pack(const Variant& v, const Init& in, double c_mult, double d_mult) {
  std::vector<double> x{std::log(in.t0), std::log(in.a0), std::log(in.d)};
  if (v.drain_per_sm) x.push_back(std::log(in.dsm * d_mult));
  if (v.capacity) {
    if (v.scope != CapacityScope::sm) x.push_back(std::log(in.c * c_mult));
    if (v.scope != CapacityScope::gpu) x.push_back(std::log(in.csm * c_mult));
  }
  if (v.floor) x.push_back(std::log(in.floor));
  if (v.buffer) x.push_back(std::log(in.buffer));
  if (v.backlog) x.push_back(std::log(in.c * c_mult / 16));
  return x;
}

// Rows that share a configuration (SMs, burst, gap, measured window) share one model
// value, so the fit evaluates the model once per configuration, not once per row: a
// sweep that repeats its grid costs what one pass does, and the fit's cost grows with
// the rows only through this grouping (one pass). Each cell keeps its rows' count,
// mean log issue time and the sum of squared deviations from that mean, which give the
// rows' sum of squared log ratios exactly: sum_i (lp - l_i)^2 = n (lp - mean)^2 + ss.
struct Cell {
  Obs obs;                  // the configuration (its issue is unused)
  double n = 0, mean = 0, ss = 0;
};
struct Data {
  std::vector<Cell> cells;
  std::size_t rows = 0;
};

Data group_cells(const std::vector<Obs>& obs) {
  using Key = std::tuple<int, double, double, int, int>;
  std::map<Key, std::size_t> index;
  Data d;
  d.rows = obs.size();
  for (const auto& o : obs) {
    auto [it, fresh] = index.emplace(Key{o.sms, o.bytes, o.gap, o.first, o.count}, d.cells.size());
    if (fresh) d.cells.push_back({o, 0, 0, 0});
    Cell& c = d.cells[it->second];
    // Welford's update: stable for many rows of nearly equal times.
    const double l = std::log(o.issue), delta = l - c.mean;
    c.n += 1;
    c.mean += delta / c.n;
    c.ss += delta * (l - c.mean);
  }
  return d;
}

double sse(const ModelParams& p, const Data& data) {
  double s = 0;
  for (const auto& c : data.cells) {
    const Obs& o = c.obs;
    const double d = std::log(window_issue_ns(p, o.sms, o.bytes, o.gap, o.first, o.count, o.stat)) - c.mean;
    s += c.n * d * d + c.ss;
  }
  return s;
}

double bic(double sse_value, std::size_t n, int k) {
  const double nn = static_cast<double>(n);
  return nn * std::log(std::max(sse_value, kSseFloor * nn) / nn) + k * std::log(nn);
}

// Relative least squares for m ~ a0 + t0*B (weights 1/m^2); a0 >= 0.
void fit_line(const std::vector<std::pair<double, double>>& pts, double& a0, double& t0) {
  double s = 0, sb = 0, sbb = 0, sm = 0, sbm = 0;
  for (auto [b, m] : pts) {
    const double w = 1.0 / (m * m);
    s += w;
    sb += w * b;
    sbb += w * b * b;
    sm += w * m;
    sbm += w * b * m;
  }
  const double det = s * sbb - sb * sb;
  if (pts.size() >= 2 && det > 1e-12 * s * sbb) {
    a0 = (sbb * sm - sb * sbm) / det;
    t0 = (s * sbm - sb * sm) / det;
  } else {
    a0 = -1;
  }
  if (a0 < 0 || t0 <= 0) {  // through the origin
    a0 = 0;
    t0 = sbm / sbb;
  }
}

Init initial_guess(const std::vector<Obs>& obs) {
  Init in{};
  // t0, a0: lower envelope of issue time per burst size.
  std::map<double, double> lowest;
  for (const auto& o : obs) {
    auto [it, fresh] = lowest.emplace(o.bytes, o.issue);
    if (!fresh) it->second = std::min(it->second, o.issue);
  }
  std::vector<std::pair<double, double>> pts(lowest.begin(), lowest.end());
  in.floor = pts.front().second;  // the smallest burst's fastest issue
  for (auto [b, m] : pts) in.floor = std::min(in.floor, m);
  fit_line(pts, in.a0, in.t0);
  for (int round = 0; round < 4 && pts.size() > 2; ++round) {
    std::vector<std::pair<double, double>> kept;
    for (auto pt : pts)
      if (pt.second <= 1.25 * (in.a0 + in.t0 * pt.first)) kept.push_back(pt);
    if (kept.size() < 2 || kept.size() == pts.size()) break;
    pts = std::move(kept);
    fit_line(pts, in.a0, in.t0);
  }
  in.a0 = std::max(in.a0, 0.5);
  in.buffer = std::max((in.floor - in.a0) / in.t0, pts.front().first);  // where the floor meets the line
  auto free_ns = [&](const Obs& o) { return in.a0 + in.t0 * o.bytes; };

  // D (and d_sm): sustained throughput of clearly drain-limited rows.
  std::vector<double> rate, rate_per_sm;
  int n_min = obs.front().sms, n_max = obs.front().sms;
  double max_inject = 0;
  for (const auto& o : obs) {
    n_min = std::min(n_min, o.sms);
    n_max = std::max(n_max, o.sms);
    max_inject = std::max(max_inject, o.sms / in.t0);
    if (o.issue > kStallRatio * free_ns(o)) rate.push_back(o.sms * o.bytes / (o.issue + o.gap));
  }
  in.d = rate.empty() ? 2 * max_inject : common::quantile(rate, 0.9);
  for (const auto& o : obs)
    if (o.issue > kStallRatio * free_ns(o)) {
      const double r = o.sms * o.bytes / (o.issue + o.gap);
      if (r < 0.7 * in.d) rate_per_sm.push_back(r / o.sms);
    }
  in.dsm = rate_per_sm.empty() ? 2 * in.d / n_min : common::median(rate_per_sm);

  // C (and c_sm): overflow of rows that start each burst empty.
  std::vector<double> cap, cap_per_sm;
  double largest_clean = 0, largest_w = 0;
  for (const auto& o : obs) {
    const double w = o.sms * o.bytes;
    largest_w = std::max(largest_w, w);
    if (o.issue <= 1.1 * free_ns(o)) {
      largest_clean = std::max(largest_clean, (o.sms / in.t0 - in.d) * o.bytes * in.t0);
    } else if (o.issue > kStallRatio * free_ns(o)) {
      const double c = w - in.d * (o.issue - in.a0);
      if (c > 0 && c < 0.8 * in.d * (o.gap + in.a0)) {
        cap.push_back(c);
        cap_per_sm.push_back(c / o.sms);
      }
    }
  }
  in.c = !cap.empty() ? common::median(cap) : largest_clean > 0 ? 2 * largest_clean : largest_w;
  in.csm = !cap_per_sm.empty() ? common::median(cap_per_sm) : in.c / std::sqrt(double(n_min) * n_max);
  return in;
}

struct Candidate {
  Variant variant;
  ModelParams params;
  double sse = 0, bic = 0;
};

// Log-parameter vector of variant v holding p's values; a limit p lacks starts
// where it does not bind (twice the GPU-wide value spread over the fewest SMs).
std::vector<double> pack_from(const Variant& v, const ModelParams& p, int n_min) {
  const double c_gpu = p.capacity_bytes_gpu.value_or(p.capacity_bytes_per_sm.value_or(kUnlimited / 1e6) * 2 * n_min);
  std::vector<double> x{std::log(p.t0_ns_per_byte), std::log(std::max(p.issue_latency_ns, 1e-3)), std::log(p.drain_GBps)};
  if (v.drain_per_sm) x.push_back(std::log(p.drain_per_sm_GBps.value_or(2 * p.drain_GBps / n_min)));
  if (v.capacity) {
    if (v.scope != CapacityScope::sm) x.push_back(std::log(std::min(c_gpu, kUnlimited)));
    if (v.scope != CapacityScope::gpu) x.push_back(std::log(p.capacity_bytes_per_sm.value_or(2 * c_gpu / n_min)));
  }
  if (v.floor) x.push_back(std::log(p.issue_floor_ns.value_or(2 * std::max(p.issue_latency_ns, 1.0))));
  if (v.buffer) {
    // From a floor fit: a0 at the floor, the buffer where the floor meets the line.
    const double a0 = p.issue_floor_ns.value_or(p.issue_latency_ns);
    if (!v.floor) x[1] = std::log(std::max(a0, 1e-3));
    x.push_back(std::log(p.issue_buffer_bytes.value_or(std::max(a0 - p.issue_latency_ns, 1.0) / p.t0_ns_per_byte)));
  }
  // A backlog limit starts at a sixteenth of the capacity (at C it would not bind).
  if (v.backlog) x.push_back(std::log(p.backlog_limit_bytes.value_or(std::min(c_gpu, kUnlimited) / 16)));
  return x;
}

// Starts from the initial guess (three capacity/drain scalings) and from every
// variant fitted before (so a variant that nests another does at least as well).
Candidate fit_variant(const ModelParams& base, const Variant& v, const Init& in, const Data& data,
                      const std::vector<ModelParams>& warm, int n_min) {
  NelderMeadOptions opt;
  opt.max_evals = 2500;
  opt.initial_step = 0.6;
  opt.restarts = 2;
  auto f = [&](std::span<const double> x) { return sse(apply(base, v, x), data); };
  NelderMeadResult best;
  best.f = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> starts;
  for (auto [cm, dm] : {std::pair{1.0, 1.0}, std::pair{0.25, 0.5}, std::pair{4.0, 2.0}}) {
    if (!v.capacity && !v.drain_per_sm && cm != 1.0) break;  // nothing to vary
    starts.push_back(pack(v, in, cm, dm));
  }
  for (const auto& w : warm) starts.push_back(pack_from(v, w, n_min));
  for (const auto& x0 : starts) {
    auto r = nelder_mead(f, x0, opt);
    if (r.f < best.f) best = std::move(r);
  }
  Candidate c{v, apply(base, v, best.x), best.f, 0};
  c.bic = bic(best.f, data.rows, v.k());
  return c;
}

// Smallest value of a limit (set by `set`) whose SSE is within the noise of
// "unlimited": n ln(SSE(v) / SSE(inf)) <= 2.
double lower_bound(const ModelParams& p, const Data& data, const std::function<void(ModelParams&, double)>& set) {
  const double n = static_cast<double>(data.rows);
  const double floor = kSseFloor * n;
  ModelParams q = p;
  set(q, kUnlimited);
  const double ref = std::max(sse(q, data), floor);
  auto ok = [&](double v) {
    set(q, v);
    return n * std::log(std::max(sse(q, data), floor) / ref) <= 2.0;
  };
  double lo = 0.0, hi = std::log(kUnlimited);  // log space, v in [1, 1e26]
  if (ok(1.0)) return 1.0;
  for (int i = 0; i < 100; ++i) {
    const double mid = 0.5 * (lo + hi);
    (ok(std::exp(mid)) ? hi : lo) = mid;
  }
  return std::exp(hi);
}

// The range of one parameter (others fixed) over which the fit stays within the
// noise of its best: n ln(SSE(v) / SSE(v*)) <= 2. An end at 1e6x from v* is open.
std::pair<double, double> profile_range(const ModelParams& p, const Data& data, double best,
                                        const std::function<void(ModelParams&, double)>& set) {
  const double n = static_cast<double>(data.rows);
  const double floor = kSseFloor * n;
  ModelParams q = p;
  set(q, best);
  const double ref = std::max(sse(q, data), floor);
  auto ok = [&](double log_v) {
    set(q, std::exp(log_v));
    return n * std::log(std::max(sse(q, data), floor) / ref) <= 2.0;
  };
  const double c = std::log(best), span = std::log(1e6);
  auto edge = [&](double dir) {
    if (ok(c + dir * span)) return std::exp(c + dir * span) * (dir > 0 ? kUnlimited : 0.0);  // open end
    double in = c, out = c + dir * span;
    for (int i = 0; i < 60; ++i) {
      const double mid = 0.5 * (in + out);
      (ok(mid) ? in : out) = mid;
    }
    return std::exp(in);
  };
  return {edge(-1), edge(+1)};
}

std::string range_text(std::pair<double, double> r) {
  auto b = [](double v) { return v <= 0 ? std::string("0") : v >= kUnlimited ? std::string("unbounded") : common::format_bytes(v); };
  return fmt::format("{} .. {}", b(r.first), b(r.second));
}

}  // namespace

namespace {

// Step 1 input: the probe loop's own time (measured, not fitted) and one observation per row.
std::vector<Obs> observations(const std::vector<SweepRow>& rows, FitTarget target, ModelParams& base,
                              const std::string& name, std::vector<std::string>* notes) {
  std::vector<double> loop;
  for (const auto& r : rows) {
    if (r.period_ns_mean > 0 && r.issue_ns_mean > 0) loop.push_back(r.period_ns_mean - r.issue_ns_mean - r.gap_ns);
    else if (r.period_ns_med > 0) loop.push_back(r.period_ns_med - r.issue_ns_med - r.gap_ns);
  }
  base.loop_overhead_ns = loop.empty() ? 0.0 : std::max(0.0, common::median(loop));
  if (loop.empty() && notes)
    notes->push_back(fmt::format("{}: no row has a period, so the probe loop's own time is taken as 0", name));
  std::vector<Obs> obs;
  std::map<double, int> sizes;
  for (const auto& r : rows) {
    XS_ASSERT(r.pattern == base.pattern && r.store == base.store && r.gpus == base.gpus && r.mode == "issue",
              "fit_group {}: rows must share pattern, store and gpus, in issue mode", name);
    obs.push_back({r.sms, r.burst_bytes, probe_gap_ns(base, r.gap_ns), measured_issue_ns(r, target),
                   std::max(0, r.warmup), std::max(1, r.bursts), target});
    ++sizes[r.burst_bytes];
  }
  XS_ASSERT(obs.size() >= 6 && sizes.size() >= 2,
            "{}: too few issue rows to fit ({} rows, {} burst sizes; need 6 and 2)", name, obs.size(), sizes.size());
  return obs;
}

// Step 3: drop limits the data do not support, report insensitive ones as lower bounds.
void clean_up(ModelParams& p, const Candidate& best, const Data& data, int n_min, int n_max, const std::string& name,
              std::vector<std::string>* notes) {
  // A floor that binds at no burst size of the data is not supported by it.
  double smallest = std::numeric_limits<double>::infinity();
  for (const auto& c : data.cells) smallest = std::min(smallest, c.obs.bytes);
  const double below_floor =
      p.issue_latency_ns + std::max(0.0, smallest - p.issue_buffer_bytes.value_or(0.0)) * p.t0_ns_per_byte;
  if (p.issue_floor_ns && *p.issue_floor_ns <= below_floor) p.issue_floor_ns.reset();
  // A buffer worth under a nanosecond of issue is not one.
  if (p.issue_buffer_bytes && *p.issue_buffer_bytes * p.t0_ns_per_byte < 1.0) p.issue_buffer_bytes.reset();
  // A backlog limit under a byte is none carried over (the log-space fit only nears 0);
  // one at the capacity never binds before it.
  if (p.backlog_limit_bytes && *p.backlog_limit_bytes < 1.0) p.backlog_limit_bytes = 0.0;
  if (p.backlog_limit_bytes && *p.backlog_limit_bytes >= rates(p, n_max).capacity) p.backlog_limit_bytes.reset();
  // A per-SM drain limit that binds at no SM count of the data is not supported by it.
  if (p.drain_per_sm_GBps && n_min * *p.drain_per_sm_GBps >= p.drain_GBps) p.drain_per_sm_GBps.reset();
  // "both": keep only the limit that binds over the data's SM range.
  if (p.capacity_scope == CapacityScope::both) {
    const double crossover = *p.capacity_bytes_gpu / *p.capacity_bytes_per_sm;  // N where the two meet
    if (crossover <= n_min) {
      p.capacity_scope = CapacityScope::gpu;
      p.capacity_bytes_per_sm.reset();
    } else if (crossover >= n_max) {
      p.capacity_scope = CapacityScope::sm;
      p.capacity_bytes_gpu.reset();
    } else if (notes) {
      notes->push_back(fmt::format("{}: capacity is per SM below {:.0f} SMs, per GPU above", name, crossover));
    }
  }
  // Drain: if an unlimited drain fits as well, no row was drain-limited.
  ModelParams q = p;
  q.drain_GBps = kUnlimited;
  q.drain_per_sm_GBps.reset();
  const double n = static_cast<double>(data.rows), floor = kSseFloor * n;
  if (n * std::log(std::max(sse(q, data), floor) / std::max(sse(p, data), floor)) < std::log(n)) {
    p.drain_per_sm_GBps.reset();
    p.drain_GBps = lower_bound(p, data, [](ModelParams& m, double v) { m.drain_GBps = v; });
    p.drain_bound = Bound::lower;
    if (notes)
      notes->push_back(fmt::format("{}: no row is drain-limited; reporting the drain's lower bound {:.1f} GB/s", name,
                                   p.drain_GBps));
  }
  if (!best.variant.capacity) {
    p.capacity_scope = CapacityScope::gpu;
    p.capacity_bytes_per_sm.reset();
    p.capacity_bytes_gpu = lower_bound(p, data, [](ModelParams& m, double v) { m.capacity_bytes_gpu = v; });
    p.capacity_bound = Bound::lower;
    if (notes)
      notes->push_back(fmt::format("{}: no row is sensitive to the capacity; reporting its lower bound {:.0f} B "
                                   "(add big bursts with gaps longer than C/D to pin it)",
                                   name, *p.capacity_bytes_gpu));
  }
}

// How well the data pin the capacity (reported, not stored).
void note_capacity_ranges(const ModelParams& p, const Data& data, const std::string& name,
                          std::vector<std::string>& notes) {
  if (p.capacity_bound != Bound::fit) return;
  if (p.capacity_bytes_gpu)
    notes.push_back(fmt::format("{}: capacity per GPU {}; the data allow {}", name,
                                common::format_bytes(*p.capacity_bytes_gpu),
                                range_text(profile_range(p, data, *p.capacity_bytes_gpu,
                                                         [](ModelParams& m, double v) { m.capacity_bytes_gpu = v; }))));
  if (p.capacity_bytes_per_sm)
    notes.push_back(fmt::format("{}: capacity per SM {}; the data allow {}", name,
                                common::format_bytes(*p.capacity_bytes_per_sm),
                                range_text(profile_range(p, data, *p.capacity_bytes_per_sm,
                                                         [](ModelParams& m, double v) { m.capacity_bytes_per_sm = v; }))));
}

}  // namespace

// fit_group with a progress bar ticked once per fitted variant (kFitVariants per group:
// eight structural ones, the best of them with the issue floor and with the buffer, the
// eight with the better of those, the best with the backlog limit); fit_sweep
// (validate.cpp, which declares both) shows it on big sweeps.
extern const std::size_t kFitVariants = 19;
ModelParams fit_group_with_progress(const std::vector<SweepRow>& rows, FitTarget target,
                                    std::vector<std::string>* notes, common::ProgressBar* bar) {
  XS_ASSERT(!rows.empty(), "fit_group: no rows");
  ModelParams base;
  base.pattern = rows.front().pattern;
  base.store = rows.front().store;
  base.gpus = rows.front().gpus;
  const std::string name = fmt::format("{}/{}/{}gpu", base.pattern, base.store, base.gpus);
  const std::vector<Obs> obs = observations(rows, target, base, name, notes);
  const Data data = group_cells(obs);
  int n_min = obs.front().sms, n_max = obs.front().sms;
  std::set<double> sizes;
  for (const auto& o : obs) {
    n_min = std::min(n_min, o.sms);
    n_max = std::max(n_max, o.sms);
    sizes.insert(o.bytes);
  }
  const double second_largest = *std::next(sizes.rbegin());  // observations() checked >= 2 sizes
  const Init in = initial_guess(obs);

  auto by_bic = [](const Candidate& a, const Candidate& b) {
    return a.bic < b.bic - 1e-9 || (std::abs(a.bic - b.bic) <= 1e-9 && a.variant.k() < b.variant.k());
  };
  std::vector<Candidate> cands;
  auto fit = [&](const Variant& v) {  // warm-started from every variant fitted before
    if (bar) bar->tick();
    for (const auto& c : cands)
      if (c.variant.name() == v.name()) return;
    std::vector<ModelParams> warm;
    for (const auto& c : cands) warm.push_back(c.params);
    cands.push_back(fit_variant(base, v, in, data, warm, n_min));
    // t0 past a buffer needs two burst sizes above it; else only the stall rows set it.
    if (v.buffer && *cands.back().params.issue_buffer_bytes >= second_largest) cands.back().bic = kUnlimited;
  };
  // The structures (per-SM drain x capacity scope) with a0 + B*t0; the best of them with
  // the issue floor and with the buffer; then every structure with the better of those
  // shapes, since a structure can stand in for a missing shape (stalls that mimic a knee).
  // The two shapes are one when a0 >= b*t0 (L = a0 + b*t0): ties go to the floor.
  auto structures = [&](bool floor, bool buffer) {
    for (bool dsm : {false, true})
      for (auto [cap, scope] : {std::pair{false, CapacityScope::gpu}, std::pair{true, CapacityScope::gpu},
                                std::pair{true, CapacityScope::sm}, std::pair{true, CapacityScope::both}})
        fit(Variant{dsm, cap, scope, floor, buffer});
  };
  structures(false, false);
  const Variant structure = std::min_element(cands.begin(), cands.end(), by_bic)->variant;
  for (bool buffer : {false, true}) {  // floor or buffer: both together is a second floor
    Variant v = structure;
    v.floor = !buffer;
    v.buffer = buffer;
    fit(v);
  }
  const Variant shape = std::min_element(cands.begin(), cands.end(), by_bic)->variant;
  if (shape.floor || shape.buffer) structures(shape.floor, shape.buffer);
  else if (bar) for (int i = 0; i < 8; ++i) bar->tick();
  // Then the best so far with the backlog limit.
  Variant with_backlog = std::min_element(cands.begin(), cands.end(), by_bic)->variant;
  with_backlog.backlog = true;
  fit(with_backlog);
  const auto best_it = std::min_element(cands.begin(), cands.end(), by_bic);
  const Candidate best = *best_it;
  ModelParams p = best.params;
  if (notes) {
    const Candidate* runner = nullptr;
    for (const auto& c : cands)
      if (&c != &*best_it && (!runner || c.bic < runner->bic)) runner = &c;
    notes->push_back(fmt::format("{}: chose '{}' by BIC (next: '{}', +{:.1f})", name, best.variant.name(),
                                 runner->variant.name(), runner->bic - best.bic));
  }
  clean_up(p, best, data, n_min, n_max, name, notes);
  if (notes) note_capacity_ranges(p, data, name, *notes);

  std::vector<double> errs;
  for (const auto& o : obs)
    errs.push_back(std::abs(window_issue_ns(p, o.sms, o.bytes, o.gap, o.first, o.count, o.stat) / o.issue - 1));
  p.n_rows = static_cast<int>(obs.size());
  p.sms_max = n_max;
  p.fit_rel_error_median = common::median(errs);
  return p;
}

ModelParams fit_group(const std::vector<SweepRow>& rows, FitTarget target, std::vector<std::string>* notes) {
  return fit_group_with_progress(rows, target, notes, nullptr);
}

}  // namespace xstage::burstgap
