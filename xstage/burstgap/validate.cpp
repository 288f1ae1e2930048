// Sweep-level fitting and validation: group the rows, hold some out, fit the
// rest, and check the model three ways:
//   held-out rows    median absolute relative error of the row's issue time (the model's
//                    value for the row's measured window of bursts);
//   smallest gap     per (pattern, store, gpus, sms, burst) series: the measured
//                    smallest backpressure-free gap vs the model's;
//   visible rows     predicted drain (issue + recovery from an empty stage) vs the
//                    measured drain_ns_med / visible_ns_med (not fitted).
//
// Measured smallest backpressure-free gap. The series' backpressure-free time
// T_free is the median of its cluster of lowest issue times (those within
// `tolerance` of the minimum: the bare minimum is biased low by noise); when that
// is far (> 25%) above the lowest issue time of the same burst size or a larger one
// anywhere in the group (small SM counts never stall), no gap of the series is free. A gap is
// free when its issue time is within `tolerance` (10%) of T_free, and so are all
// longer gaps. The grid value is the first free gap; its error against a model is
// dominated by the grid spacing, so the comparison uses a refined value inside the
// bracket (g_a stalled, g_b free): in the drain-limited state the period T + g is
// constant (W/D), so the stalled row crosses the tolerance at
//   g* = T_a + g_a - (1 + tolerance) * T_free,   clamped to [g_a, g_b].
// Only brackets whose stalled row is clearly stalled (T_a >= (1 + 2 tolerance)
// T_free) are scored: otherwise the transition sits inside the noise band and the
// smallest free gap is not resolved by the grid. The model's value uses the same
// tolerance on its value for the series' measured window of bursts.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "common/check.hpp"
#include "common/progress.hpp"
#include "common/stats.hpp"
#include "xstage/burstgap/burstgap.hpp"

namespace xstage::burstgap {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

int pattern_rank(const std::string& p) { return p == "local" ? 0 : p == "peer" ? 1 : 2; }
int store_rank(const std::string& s) { return s == "st4" ? 0 : s == "st8" ? 1 : s == "st16" ? 2 : 3; }

using GroupKey = std::tuple<int, int, int>;  // pattern, store, gpus (sortable)
GroupKey key_of(const SweepRow& r) { return {pattern_rank(r.pattern), store_rank(r.store), r.gpus}; }

std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

RowPrediction predict_row(const ModelParams& p, const SweepRow& r, FitTarget target) {
  RowPrediction out{r, measured_issue_ns(r, target), predict_row_issue_ns(p, r, target), 0};
  out.rel_error = out.predicted_ns / out.measured_ns - 1;
  return out;
}

// Smallest requested probe gap at which the model's value for a row like `row`
// is within tolerance of its backpressure-free time.
double model_free_gap(const ModelParams& p, const SweepRow& row, FitTarget stat, double tolerance) {
  const double limit = (1 + tolerance) * free_issue_ns(p, row.burst_bytes);
  SweepRow r = row;
  auto ok = [&](double g) {
    r.gap_ns = g;
    return predict_row_issue_ns(p, r, stat) <= limit;
  };
  if (ok(0)) return 0;
  double hi = 1e3;
  while (!ok(hi)) {
    hi *= 4;
    if (hi > 1e13) return kInf;
  }
  double lo = 0;
  for (int i = 0; i < 100; ++i) {
    const double mid = 0.5 * (lo + hi);
    (ok(mid) ? hi : lo) = mid;
  }
  return hi;
}

// Median of the cluster of values within `tolerance` of the minimum (twice refined).
double robust_min(std::vector<double> xs, double tolerance) {
  double ref = *std::min_element(xs.begin(), xs.end());
  for (int round = 0; round < 2; ++round) {
    std::vector<double> cluster;
    for (double x : xs)
      if (x <= (1 + tolerance) * ref) cluster.push_back(x);
    ref = common::median(cluster);
  }
  return ref;
}

double abs_median(const std::vector<double>& xs) {
  std::vector<double> a;
  for (double x : xs) a.push_back(std::abs(x));
  return a.empty() ? -1 : common::median(a);
}

}  // namespace

std::vector<bool> holdout_mask(const std::vector<SweepRow>& rows, double fraction, std::uint64_t seed) {
  XS_ASSERT(fraction >= 0 && fraction < 1, "--holdout must be in [0, 1) (got {})", fraction);
  std::vector<bool> mask(rows.size(), false);
  if (fraction == 0) return mask;
  std::map<GroupKey, std::vector<std::pair<std::uint64_t, std::size_t>>> groups;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    const std::string id = fmt::format("{}|{}|{}|{}|{}|{}|{}|{}", r.pattern, r.store, r.gpus, r.mode, r.sms,
                                       r.burst_bytes, r.gap_ns, r.bursts);
    groups[key_of(r)].push_back({splitmix64(fnv1a(id) ^ splitmix64(seed)), i});
  }
  for (auto& [key, members] : groups) {
    std::sort(members.begin(), members.end());
    const auto n = members.size();
    std::size_t take = static_cast<std::size_t>(std::llround(fraction * static_cast<double>(n)));
    if (n >= 2) take = std::clamp<std::size_t>(take, 1, n - 1);
    else take = 0;
    for (std::size_t k = 0; k < take; ++k) mask[members[k].second] = true;
  }
  return mask;
}

namespace {
// The lowest issue time a burst of `bytes` can have in the group: the robust minimum of
// the rows of that size or of any larger one, since a larger burst takes at least as
// long free. (Over its own size alone, a size measured at one SM count only, with gaps
// too short for it to recover, would pass its least stalled row for free.)
double free_envelope(const std::map<std::tuple<int, int, int, double>, std::vector<double>>& by_size,
                     const std::tuple<int, int, int, int, double>& series, double bytes, double tolerance) {
  double env = kInf;
  for (const auto& [k, ts] : by_size)
    if (std::get<0>(k) == std::get<0>(series) && std::get<1>(k) == std::get<1>(series) &&
        std::get<2>(k) == std::get<2>(series) && std::get<3>(k) >= bytes)
      env = std::min(env, robust_min(ts, tolerance));
  return env;
}
}  // namespace

std::vector<MinGapCheck> check_min_gaps(const Params& params, const std::vector<SweepRow>& rows, double tolerance) {
  auto t = [&](const SweepRow* r) { return measured_issue_ns(*r, params.target); };
  std::map<std::tuple<int, int, int, int, double>, std::vector<const SweepRow*>> series;
  std::map<std::tuple<int, int, int, double>, std::vector<double>> by_size;  // group x burst size
  for (const auto& r : rows)
    if (r.mode == "issue") {
      series[{pattern_rank(r.pattern), store_rank(r.store), r.gpus, r.sms, r.burst_bytes}].push_back(&r);
      by_size[{pattern_rank(r.pattern), store_rank(r.store), r.gpus, r.burst_bytes}].push_back(t(&r));
    }
  std::vector<MinGapCheck> out;
  for (auto& [key, rs] : series) {
    std::sort(rs.begin(), rs.end(), [](auto* a, auto* b) { return a->gap_ns < b->gap_ns; });
    std::vector<double> gaps;
    for (auto* r : rs)
      if (gaps.empty() || r->gap_ns != gaps.back()) gaps.push_back(r->gap_ns);
    if (gaps.size() < 3) continue;
    const ModelParams* p = nullptr;
    for (const auto& g : params.groups)
      if (g.pattern == rs.front()->pattern && g.store == rs.front()->store && g.gpus == rs.front()->gpus) p = &g;
    if (!p) continue;

    MinGapCheck c;
    c.pattern = rs.front()->pattern;
    c.store = rs.front()->store;
    c.gpus = rs.front()->gpus;
    c.sms = rs.front()->sms;
    c.burst_bytes = rs.front()->burst_bytes;
    std::vector<double> ts;
    for (auto* r : rs) ts.push_back(t(r));
    c.free_ns = robust_min(ts, tolerance);
    const double envelope = free_envelope(by_size, key, c.burst_bytes, tolerance);
    const double limit = (1 + tolerance) * c.free_ns;
    // First index from which every longer gap is free.
    std::size_t first_free = rs.size();
    if (c.free_ns <= 1.25 * envelope)
      for (std::size_t i = rs.size(); i-- > 0;) {
        if (ts[i] > limit) break;
        first_free = i;
      }
    c.model_ns = model_free_gap(*p, *rs.back(), params.target, tolerance);
    c.model_strict_ns = std::max(0.0, min_gap_ns(*p, c.sms, c.burst_bytes) - p->loop_overhead_ns);
    if (first_free == rs.size()) {
      c.status = "free_at_no_gap";
      c.model_agrees = c.model_ns > rs.back()->gap_ns;
    } else if (first_free == 0) {
      c.status = "free_at_all_gaps";
      c.measured_grid_ns = rs.front()->gap_ns;
      c.model_agrees = c.model_ns <= rs.front()->gap_ns;
    } else {
      const SweepRow& a = *rs[first_free - 1];
      const double gb = rs[first_free]->gap_ns;
      c.status = "bracketed";
      c.bracketed = true;
      c.measured_grid_ns = gb;
      c.measured_ns = std::clamp(ts[first_free - 1] + a.gap_ns - limit, a.gap_ns, gb);
      c.scored = ts[first_free - 1] >= (1 + 2 * tolerance) * c.free_ns && c.measured_ns > 0;
      if (c.scored) c.rel_error = std::isfinite(c.model_ns) ? std::abs(c.model_ns / c.measured_ns - 1) : kInf;
    }
    out.push_back(c);
  }
  return out;
}

// Defined in fit.cpp: fit_group with a progress bar, ticked kFitVariants times per group.
extern const std::size_t kFitVariants;
ModelParams fit_group_with_progress(const std::vector<SweepRow>& rows, FitTarget target,
                                    std::vector<std::string>* notes, common::ProgressBar* bar);

namespace {

// Sweeps from this many issue rows on show a progress bar while they are fitted.
constexpr std::size_t kProgressRows = 5000;

// The fit's statistic must be measured on every row it uses: falling back to another
// column (measured_issue_ns does, per row, for plots) would fit a different quantity.
void check_target_column(const std::vector<SweepRow>& rows, FitTarget target, const std::string& source) {
  if (target != FitTarget::mean) return;
  std::size_t missing = 0, first = 0, issue = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].mode != "issue") continue;
    ++issue;
    if (rows[i].issue_ns_mean <= 0 && missing++ == 0) first = i;
  }
  if (missing == 0) return;
  if (missing == issue)
    throw common::Error(fmt::format("{}: no column issue_ns_mean, the fit target: fit the median with --target median, "
                                    "or measure the mean (a newer probe sweep)",
                                    source));
  throw common::Error(fmt::format("{}: row {}: issue_ns_mean, the fit target, is not measured ({} of {} issue rows lack "
                                  "it); fit with --target median or drop those rows",
                                  source, first + 1, missing, issue));
}

}  // namespace

FitResult fit_sweep(const std::vector<SweepRow>& rows, const FitOptions& options, const std::string& source) {
  XS_ASSERT(options.free_tolerance > 0 && options.free_tolerance < 1, "free tolerance must be in (0, 1)");
  check_target_column(rows, options.target, source);
  FitResult res;
  res.params.source_csv = source;
  res.params.holdout_fraction = options.holdout;
  res.params.seed = options.seed;
  res.params.target = options.target;
  res.free_tolerance = options.free_tolerance;

  std::vector<SweepRow> issue;
  for (const auto& r : rows)
    if (r.mode == "issue") issue.push_back(r);
  XS_ASSERT(!issue.empty(), "{}: no issue-mode rows to fit", source);
  const auto mask = holdout_mask(issue, options.holdout, options.seed);

  std::map<GroupKey, std::pair<std::vector<SweepRow>, std::vector<SweepRow>>> groups;  // train, held out
  for (std::size_t i = 0; i < issue.size(); ++i)
    (mask[i] ? groups[key_of(issue[i])].second : groups[key_of(issue[i])].first).push_back(issue[i]);

  std::vector<double> held_errors;
  common::ProgressBar bar("fit", groups.size() * kFitVariants, issue.size() >= kProgressRows);
  for (auto& [key, parts] : groups) {
    auto& [train, held] = parts;
    const SweepRow& any = train.empty() ? held.front() : train.front();
    ModelParams p;
    try {
      p = fit_group_with_progress(train, options.target, &res.notes, &bar);
    } catch (const common::Error& e) {
      res.notes.push_back(fmt::format("{}/{}/{}gpu skipped: {}", any.pattern, any.store, any.gpus, e.what()));
      continue;
    }
    res.params.groups.push_back(p);
    for (const auto& r : train) res.fitted.push_back(predict_row(p, r, options.target));
    for (const auto& r : held) {
      res.held_out.push_back(predict_row(p, r, options.target));
      held_errors.push_back(res.held_out.back().rel_error);
    }
  }
  bar.finish();
  XS_ASSERT(!res.params.groups.empty(), "{}: no (pattern, store) group had enough rows to fit ({})", source,
            res.notes.empty() ? "no rows" : res.notes.back());
  res.holdout_mdape = abs_median(held_errors);

  res.min_gaps = check_min_gaps(res.params, issue, options.free_tolerance);
  std::vector<double> gap_errors;
  for (const auto& c : res.min_gaps)
    if (c.scored) gap_errors.push_back(c.rel_error);
  res.min_gap_median_rel_error = abs_median(gap_errors);

  for (const auto& r : rows) {
    if (r.mode != "visible") continue;
    const ModelParams* p = nullptr;
    for (const auto& g : res.params.groups)
      if (g.pattern == r.pattern && g.store == r.store && g.gpus == r.gpus) p = &g;
    if (!p) continue;
    DrainCheck d{r, visible_drain_ns(*p, r.sms, r.burst_bytes), -1, -1};
    if (r.drain_ns_med > 0) d.rel_error_drain = d.predicted_ns / r.drain_ns_med - 1;
    if (r.visible_ns_med > 0) d.rel_error_visible = d.predicted_ns / r.visible_ns_med - 1;
    res.drains.push_back(d);
  }
  return res;
}

std::string report_to_json(const FitResult& res) {
  using nlohmann::json;
  auto num = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
  auto row_json = [&](const RowPrediction& p) {
    return json{{"pattern", p.row.pattern}, {"store", p.row.store}, {"gpus", p.row.gpus}, {"sms", p.row.sms},
                {"burst_bytes", p.row.burst_bytes}, {"gap_ns", p.row.gap_ns}, {"measured_ns", p.measured_ns},
                {"issue_ns_med", p.row.issue_ns_med}, {"issue_ns_mean", p.row.issue_ns_mean},
                {"predicted_ns", p.predicted_ns}, {"rel_error", p.rel_error}};
  };
  json j;
  j["source_csv"] = res.params.source_csv;
  j["params"] = json::parse(params_to_json(res.params));
  j["target"] = to_string(res.params.target);
  j["holdout"] = {{"fraction", res.params.holdout_fraction},
                  {"seed", res.params.seed},
                  {"n_rows", res.held_out.size()},
                  {"median_abs_rel_error", num(res.holdout_mdape)},
                  {"rows", json::array()}};
  for (const auto& p : res.held_out) j["holdout"]["rows"].push_back(row_json(p));
  std::vector<double> fit_errs;
  for (const auto& p : res.fitted) fit_errs.push_back(p.rel_error);
  j["fit"] = {{"n_rows", res.fitted.size()}, {"median_abs_rel_error", num(abs_median(fit_errs))}};

  std::size_t bracketed = 0, scored = 0, unbracketed_agree = 0;
  json gaps = json::array();
  for (const auto& c : res.min_gaps) {
    bracketed += c.bracketed;
    scored += c.scored;
    unbracketed_agree += !c.bracketed && c.model_agrees;
    gaps.push_back({{"pattern", c.pattern}, {"store", c.store}, {"gpus", c.gpus}, {"sms", c.sms},
                    {"burst_bytes", c.burst_bytes}, {"status", c.status}, {"scored", c.scored},
                    {"model_agrees", c.model_agrees}, {"free_ns", c.free_ns},
                    {"measured_grid_ns", num(c.measured_grid_ns)}, {"measured_ns", num(c.measured_ns)},
                    {"model_ns", num(c.model_ns)}, {"model_strict_ns", num(c.model_strict_ns)},
                    {"rel_error", num(c.rel_error)}});
  }
  j["min_gap"] = {{"tolerance", res.free_tolerance},
                  {"n_series", res.min_gaps.size()},
                  {"n_bracketed", bracketed},
                  {"n_scored", scored},
                  {"n_unbracketed_model_agrees", unbracketed_agree},
                  {"median_rel_error", num(res.min_gap_median_rel_error)},
                  {"series", gaps}};

  std::vector<double> de, ve;
  json drains = json::array();
  for (const auto& d : res.drains) {
    if (d.rel_error_drain > -1) de.push_back(d.rel_error_drain);
    if (d.rel_error_visible > -1) ve.push_back(d.rel_error_visible);
    drains.push_back({{"pattern", d.row.pattern}, {"store", d.row.store}, {"gpus", d.row.gpus}, {"sms", d.row.sms},
                      {"burst_bytes", d.row.burst_bytes}, {"gap_ns", d.row.gap_ns},
                      {"predicted_drain_ns", d.predicted_ns}, {"drain_ns_med", d.row.drain_ns_med},
                      {"visible_ns_med", d.row.visible_ns_med}});
  }
  j["visible"] = {{"n_rows", res.drains.size()},
                  {"drain_median_abs_rel_error", num(abs_median(de))},
                  {"visible_median_abs_rel_error", num(abs_median(ve))},
                  {"rows", drains}};
  j["notes"] = res.notes;
  return j.dump(2) + "\n";
}

}  // namespace xstage::burstgap
