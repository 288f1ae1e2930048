#include "gait/eval/fusion.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "common/check.hpp"
#include "common/plot.hpp"

namespace gait::eval {

std::vector<FusionCandidate> fusion_candidates(std::span<const double> scales) {
  XS_ASSERT(!scales.empty(), "tune-fusion: no skeleton scales to try");
  std::vector<double> a(scales.begin(), scales.end());
  for (double s : a) XS_ASSERT(std::isfinite(s) && s >= 0, "tune-fusion: skeleton scale {} must be finite and >= 0", s);
  std::sort(a.begin(), a.end());
  a.erase(std::unique(a.begin(), a.end()), a.end());
  std::vector<FusionCandidate> out = {{"fused", 1.0, {1, 0, 0}}};
  for (double s : a) out.push_back({"branches", s, {0, 0.5, 0.5 * s}});
  for (double s : a) out.push_back({"fused+branches", s, {1.0 / 3, 1.0 / 3, s / 3}});
  return out;
}

FusionTuning tune_fusion(const EmbeddingSet& all_heads, const Protocol& protocol, std::span<const double> scales,
                         int threads) {
  XS_ASSERT(all_heads.parts >= 3 && all_heads.parts % 3 == 0,
            "tune-fusion: the embeddings have {} parts, not the 3p of heads fused+branches", all_heads.parts);
  FusionTuning t;
  t.parts = all_heads.parts / 3;
  const int p = t.parts;
  // The skeleton head is one part repeated p times: check, then use one copy.
  for (std::size_t i = 0; i < all_heads.size(); ++i)
    for (int c = 0; c < all_heads.channels; ++c) {
      const float* r = all_heads.row(i) + static_cast<std::size_t>(c) * all_heads.parts + 2 * p;
      XS_ASSERT(std::all_of(r, r + p, [&](float v) { return v == r[0]; }),
                "tune-fusion: the last third of the parts is not one part repeated (not a fused+branches embedding)");
    }
  const std::array<PairDistances, 3> d = {pair_distances(slice_parts(all_heads, 0, p), protocol, threads),
                                          pair_distances(slice_parts(all_heads, p, p), protocol, threads),
                                          pair_distances(slice_parts(all_heads, 2 * p, 1), protocol, threads)};
  XS_ASSERT(!d[0].probes.empty() && !d[0].gallery.empty(), "tune-fusion: no test probes or gallery in the set");
  for (const FusionCandidate& c : fusion_candidates(scales)) {
    PairDistances mix = d[0];
    for (std::size_t k = 0; k < mix.d.size(); ++k)
      mix.d[k] = c.weight[0] * d[0].d[k] + c.weight[1] * d[1].d[k] + c.weight[2] * d[2].d[k];
    FusionRow row{c, rank1_from_distances(all_heads.keys, protocol, mix), 0};
    row.score = (row.rank1.mean[0] + row.rank1.mean[1] + row.rank1.mean[2]) / 3;
    XS_ASSERT(std::isfinite(row.score), "tune-fusion: the set lacks an NM, BG or CL probe set");
    t.rows.push_back(std::move(row));
  }
  for (std::size_t i = 1; i < t.rows.size(); ++i)
    if (t.rows[i].score > t.rows[t.best].score) t.best = i;
  return t;
}

nlohmann::json fusion_json(const FusionTuning& t) {
  auto row_json = [](const FusionRow& r) {
    auto r2 = [](double v) { return std::round(v * 100) / 100; };
    return nlohmann::json{{"heads", r.candidate.heads},
                          {"skeleton_scale", r.candidate.skeleton_scale},
                          {"NM", r2(r.rank1.mean[0])},
                          {"BG", r2(r.rank1.mean[1])},
                          {"CL", r2(r.rank1.mean[2])},
                          {"score", r2(r.score)}};
  };
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : t.rows) rows.push_back(row_json(r));
  return {{"parts_per_head", t.parts}, {"rows", rows}, {"best", row_json(t.rows.at(t.best))}};
}

std::string format_fusion_table(const FusionTuning& t) {
  std::string s = fmt::format("{:<16} {:>8} {:>7} {:>7} {:>7} {:>7}\n", "heads", "skel x", "NM", "BG", "CL", "mean");
  for (std::size_t i = 0; i < t.rows.size(); ++i) {
    const FusionRow& r = t.rows[i];
    s += fmt::format("{:<16} {:>8} {:>7.2f} {:>7.2f} {:>7.2f} {:>7.2f}{}\n", r.candidate.heads,
                     r.candidate.heads == "fused" ? std::string("-") : fmt::format("{:g}", r.candidate.skeleton_scale),
                     r.rank1.mean[0], r.rank1.mean[1], r.rank1.mean[2], r.score, i == t.best ? "  <- best" : "");
  }
  return s;
}

void write_fusion_chart(const std::filesystem::path& png, const FusionTuning& t, const std::string& title) {
  namespace plot = common::plot;
  if (!plot::charts_available()) {  // the tables carry the same figures
    fmt::print(stderr, "{}: skipped, this build draws no charts (PLplot was not found)\n", png.string());
    return;
  }
  plot::Chart c;
  c.title = title;
  c.x = {.label = "skeleton scale a"};
  c.y = {.label = "rank-1, mean of NM, BG, CL (%)"};
  plot::Series branches{.label = "branches"}, both{.label = "fused+branches"};
  double fused = 0, lo = 0, hi = 1;
  bool first = true;
  for (const FusionRow& r : t.rows) {
    const double a = r.candidate.skeleton_scale;
    if (r.candidate.heads == "fused") fused = r.score;
    if (r.candidate.heads == "fused") continue;
    (r.candidate.heads == "branches" ? branches : both).x.push_back(a);
    (r.candidate.heads == "branches" ? branches : both).y.push_back(r.score);
    lo = first ? a : std::min(lo, a);
    hi = first ? a : std::max(hi, a);
    first = false;
  }
  c.series = {branches, both};
  c.series.push_back(plot::horizontal_line("fused", fused, lo, hi > lo ? hi : lo + 1));
  const FusionRow& b = t.rows.at(t.best);
  c.series.push_back({.label = fmt::format("best: {} a = {:g}", b.candidate.heads, b.candidate.skeleton_scale),
                      .x = {b.candidate.heads == "fused" ? lo : b.candidate.skeleton_scale},
                      .y = {b.score},
                      .line = plot::LineStyle::none,
                      .marker = plot::Marker::diamond,
                      .marker_radius = 7});
  plot::write_chart(c, png);
}

}  // namespace gait::eval
