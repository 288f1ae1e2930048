// The Burst-Gap PNG plots: measured sweep points (markers, solid) with the
// model's prediction (dashed, same colour) when parameters are given.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "common/check.hpp"
#include "common/plot.hpp"
#include "xstage/burstgap/burstgap.hpp"

namespace xstage::burstgap {

namespace plot = common::plot;

namespace {

constexpr plot::Color kModelGray{110, 110, 110};
constexpr plot::Marker kMarkers[] = {plot::Marker::circle, plot::Marker::square, plot::Marker::diamond,
                                     plot::Marker::triangle};

std::string short_ns(double ns) {
  if (ns == 0) return "0";
  if (ns < 1000) return fmt::format("{:g} ns", ns);
  return fmt::format("{:g} us", ns / 1000);
}

std::string short_bytes(double b) {
  if (b >= 1024.0 * 1024 && std::fmod(b, 1024.0 * 1024) == 0) return fmt::format("{:g}M", b / (1024.0 * 1024));
  if (b >= 1024 && std::fmod(b, 1024.0) == 0) return fmt::format("{:g}K", b / 1024);
  return fmt::format("{:g}", b);
}

// Powers of two spanning [lo, hi] (explicit ticks for byte and SM axes).
std::vector<double> pow2_ticks(double lo, double hi) {
  std::vector<double> t;
  for (double v = std::exp2(std::floor(std::log2(lo))); v <= hi * 1.0001; v *= 2)
    if (v >= lo * 0.9999) t.push_back(v);
  if (t.size() > 9) {  // thin to every other power
    std::vector<double> thin;
    for (std::size_t i = 0; i < t.size(); i += 2) thin.push_back(t[i]);
    t = thin;
  }
  return t;
}

// Log-spaced points over [lo, hi] (model curves).
std::vector<double> log_space(double lo, double hi, int n) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(lo * std::pow(hi / lo, static_cast<double>(i) / (n - 1)));
  return v;
}

const ModelParams* find_group(const Params* params, const std::string& pattern, const std::string& store, int gpus) {
  if (!params) return nullptr;
  for (const auto& g : params->groups)
    if (g.pattern == pattern && g.store == store && g.gpus == gpus) return &g;
  return nullptr;
}

std::string join(const std::set<int>& xs) {
  std::string s;
  for (int x : xs) s += (s.empty() ? "" : ", ") + std::to_string(x);
  return s;
}

}  // namespace

void plot_issue_vs_burst(const std::vector<SweepRow>& rows, const Params* params, const PlotSelection& sel,
                         const std::filesystem::path& path) {
  std::vector<const SweepRow*> pick;
  std::set<int> gpus_seen;
  for (const auto& r : rows)
    if (r.mode == "issue" && r.pattern == sel.pattern && r.store == sel.store) gpus_seen.insert(r.gpus);
  XS_ASSERT(!gpus_seen.empty(), "plot: the sweep has no issue rows for {}/{}", sel.pattern, sel.store);
  const int gpus = sel.gpus ? sel.gpus : *gpus_seen.begin();
  XS_ASSERT(gpus_seen.count(gpus), "plot: no {}/{} rows with {} GPUs (have {})", sel.pattern, sel.store, gpus,
            join(gpus_seen));
  std::set<int> sms_seen;
  for (const auto& r : rows)
    if (r.mode == "issue" && r.pattern == sel.pattern && r.store == sel.store && r.gpus == gpus) sms_seen.insert(r.sms);
  const int sms = sel.sms ? sel.sms : *sms_seen.rbegin();
  XS_ASSERT(sms_seen.count(sms), "plot: no {}/{} rows with {} SMs (have {})", sel.pattern, sel.store, sms,
            join(sms_seen));
  std::map<double, std::vector<std::pair<double, double>>> by_gap;  // gap -> (bytes, issue)
  double bmin = 1e300, bmax = 0;
  SweepRow like;  // warm-up and measured bursts of the rows, for the model curves
  for (const auto& r : rows)
    if (r.mode == "issue" && r.pattern == sel.pattern && r.store == sel.store && r.gpus == gpus && r.sms == sms) {
      like = r;
      by_gap[r.gap_ns].push_back({r.burst_bytes, measured_issue_ns(r, sel.target)});
      bmin = std::min(bmin, r.burst_bytes);
      bmax = std::max(bmax, r.burst_bytes);
    }
  const ModelParams* model = find_group(params, sel.pattern, sel.store, gpus);

  plot::Chart c;
  c.title = fmt::format("Issue time per burst: {}, {}, {} SMs, {} GPUs", sel.pattern, sel.store, sms, gpus);
  c.width = 1100;
  c.height = 680;
  c.legend = plot::LegendPos::outside_right;
  c.x = {.label = "burst bytes per SM", .scale = plot::Scale::log10, .ticks = pow2_ticks(bmin, bmax),
         .tick_format = short_bytes};
  c.y = {.label = fmt::format("{} issue time per burst (ns)", sel.target == FitTarget::mean ? "mean" : "median"),
         .scale = plot::Scale::log10};
  // Gaps are ordered: a sequential colour map, short gaps dark, long gaps light.
  std::size_t i = 0;
  auto color_of = [&](std::size_t k) {
    return plot::sequential(by_gap.size() > 1 ? 0.85 * static_cast<double>(k) / (by_gap.size() - 1) : 0.0);
  };
  for (auto& [gap, pts] : by_gap) {
    std::sort(pts.begin(), pts.end());
    plot::Series s{.label = "gap " + short_ns(gap), .color = color_of(i), .marker = kMarkers[i % 4]};
    for (auto [b, t] : pts) {
      s.x.push_back(b);
      s.y.push_back(t);
    }
    c.series.push_back(std::move(s));
    if (model) {
      plot::Series m{.color = color_of(i), .line = plot::LineStyle::dashed, .marker = plot::Marker::none,
                     .line_width = 1.5};
      for (double b : log_space(bmin, bmax, 60)) {
        like.burst_bytes = b;
        like.gap_ns = gap;
        m.x.push_back(b);
        m.y.push_back(predict_row_issue_ns(*model, like, sel.target));
      }
      c.series.push_back(std::move(m));
    }
    ++i;
  }
  if (model)
    c.series.push_back({.label = "model", .color = kModelGray, .line = plot::LineStyle::dashed,
                        .marker = plot::Marker::none, .line_width = 1.5});
  plot::write_chart(c, path);
}

void plot_drain_vs_sms(const std::vector<SweepRow>& rows, const Params* params, const std::string& store,
                       const std::filesystem::path& path) {
  // Per (pattern, gpus): the sustained row of each SM count = smallest gap, then largest burst.
  struct Key {
    int rank;
    std::string pattern;
    int gpus;
    bool operator<(const Key& o) const { return std::tie(rank, pattern, gpus) < std::tie(o.rank, o.pattern, o.gpus); }
  };
  std::map<Key, std::map<int, const SweepRow*>> best;
  std::set<int> gpus_seen;
  for (const auto& r : rows) {
    if (r.mode != "issue" || r.store != store) continue;
    const int rank = r.pattern == "local" ? 0 : r.pattern == "peer" ? 1 : 2;
    const SweepRow*& cur = best[{rank, r.pattern, r.gpus}][r.sms];
    if (!cur || r.gap_ns < cur->gap_ns || (r.gap_ns == cur->gap_ns && r.burst_bytes > cur->burst_bytes)) cur = &r;
    gpus_seen.insert(r.gpus);
  }
  XS_ASSERT(!best.empty(), "plot: the sweep has no issue rows for store {}", store);
  int nmin = 1 << 30, nmax = 0;
  for (const auto& [k, m] : best) {
    nmin = std::min(nmin, m.begin()->first);
    nmax = std::max(nmax, m.rbegin()->first);
  }
  plot::Chart c;
  c.title = fmt::format("Sustained drain vs issuing SMs ({}, no gap, largest burst)", store);
  c.x = {.label = "issuing SMs", .scale = plot::Scale::log10, .ticks = pow2_ticks(nmin, nmax)};
  c.y = {.label = "sustained GB/s", .include_zero = true};
  std::size_t i = 0;
  bool any_model = false;
  for (const auto& [key, by_sms] : best) {
    const std::string label = gpus_seen.size() > 1 ? fmt::format("{} ({} GPUs)", key.pattern, key.gpus) : key.pattern;
    plot::Series s{.label = label, .color = plot::palette(i), .marker = kMarkers[i % 4]};
    double bytes = 0, gap = 0;
    for (const auto& [n, r] : by_sms) {
      s.x.push_back(n);
      const double period = r->period_ns_mean > 0 ? r->period_ns_mean : measured_issue_ns(*r, FitTarget::mean) + r->gap_ns;
      s.y.push_back(r->gbps > 0 ? r->gbps : n * r->burst_bytes / period);
      bytes = std::max(bytes, r->burst_bytes);
      gap = r->gap_ns;
    }
    c.series.push_back(std::move(s));
    if (const ModelParams* model = find_group(params, key.pattern, store, key.gpus)) {
      any_model = true;
      plot::Series m{.color = plot::palette(i), .line = plot::LineStyle::dashed, .marker = plot::Marker::none,
                     .line_width = 1.5};
      std::set<int> ns;
      for (double v : log_space(nmin, nmax, 80)) ns.insert(static_cast<int>(std::lround(v)));
      SweepRow like = *by_sms.rbegin()->second;
      for (int n : ns) {
        like.sms = n;
        like.burst_bytes = bytes;
        like.gap_ns = gap;
        m.x.push_back(n);
        m.y.push_back(n * bytes / (predict_row_issue_ns(*model, like, FitTarget::mean) + probe_gap_ns(*model, gap)));
      }
      c.series.push_back(std::move(m));
    }
    ++i;
  }
  if (any_model)
    c.series.push_back({.label = "model", .color = kModelGray, .line = plot::LineStyle::dashed,
                        .marker = plot::Marker::none, .line_width = 1.5});
  plot::write_chart(c, path);
}

void plot_predicted_vs_measured(const std::vector<RowPrediction>& fitted, const std::vector<RowPrediction>& held_out,
                                const std::filesystem::path& path) {
  XS_ASSERT(!fitted.empty() || !held_out.empty(), "plot: no predictions to draw");
  std::vector<std::string> patterns;
  double lo = 1e300, hi = 0;
  for (const auto* set : {&fitted, &held_out})
    for (const auto& p : *set) {
      if (std::find(patterns.begin(), patterns.end(), p.row.pattern) == patterns.end()) patterns.push_back(p.row.pattern);
      lo = std::min({lo, p.measured_ns, p.predicted_ns});
      hi = std::max({hi, p.measured_ns, p.predicted_ns});
    }
  plot::Chart c;
  c.title = held_out.empty() ? "Predicted vs measured issue time"
                             : fmt::format("Predicted vs measured issue time ({} held-out rows)", held_out.size());
  c.width = 820;
  c.height = 760;
  c.x = {.label = "measured issue time per burst (ns)", .scale = plot::Scale::log10};
  c.y = {.label = "model (ns)", .scale = plot::Scale::log10};
  c.series.push_back({.label = "y = x", .x = {lo / 1.2, hi * 1.2}, .y = {lo / 1.2, hi * 1.2}, .color = kModelGray,
                      .line = plot::LineStyle::dashed, .marker = plot::Marker::none, .line_width = 1.5});
  c.series.push_back({.label = "+-15%", .x = {lo / 1.2, hi * 1.2}, .y = {lo / 1.2 * 1.15, hi * 1.2 * 1.15},
                      .color = plot::Color{190, 190, 190}, .marker = plot::Marker::none, .line_width = 1.0});
  c.series.push_back({.x = {lo / 1.2, hi * 1.2}, .y = {lo / 1.2 / 1.15, hi * 1.2 / 1.15},
                      .color = plot::Color{190, 190, 190}, .marker = plot::Marker::none, .line_width = 1.0});
  for (std::size_t i = 0; i < patterns.size(); ++i) {
    for (bool held : {false, true}) {
      const auto& set = held ? held_out : fitted;
      const std::string label =
          held_out.empty() ? patterns[i] : fmt::format("{} {}", patterns[i], held ? "held out" : "fitted");
      plot::Series s{.label = label,
                     .color = plot::palette(i), .line = plot::LineStyle::none,
                     .marker = held ? plot::Marker::diamond : plot::Marker::circle,
                     .marker_radius = held ? 4.5 : 2.5};
      for (const auto& p : set)
        if (p.row.pattern == patterns[i]) {
          s.x.push_back(p.measured_ns);
          s.y.push_back(p.predicted_ns);
        }
      if (!s.x.empty()) c.series.push_back(std::move(s));
    }
  }
  plot::write_chart(c, path);
}

}  // namespace xstage::burstgap
