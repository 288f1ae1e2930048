#include "gait/eval/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "common/check.hpp"
#include "common/files.hpp"
#include "common/plot.hpp"

namespace gait::eval {

namespace fs = std::filesystem;

namespace {

std::string cell(double v, int width, int prec) {
  return std::isnan(v) ? fmt::format("{:>{}}", "-", width) : fmt::format("{:>{}.{}f}", v, width, prec);
}

}  // namespace

std::string format_rank1_table(const Rank1Result& r) {
  std::string s = "CASIA-B rank-1 accuracy (%), gallery nm-01..04, identical views excluded\n";
  s += fmt::format("{:<6}", "probe");
  for (int v : r.views) s += fmt::format(" {:>6}", view_name(v));
  s += fmt::format(" {:>7}\n", "mean");
  for (std::size_t i = 0; i < kProbeSets.size(); ++i) {
    s += fmt::format("{:<6}", probe_set_name(kProbeSets[i]));
    for (double v : r.per_view[i]) s += fmt::format(" {}", cell(v, 6, 1));
    s += fmt::format(" {}\n", cell(r.mean[i], 7, 2));
  }
  s += fmt::format("({} gallery sequences; probes NM {}, BG {}, CL {})\n", r.gallery, r.probes[0], r.probes[1],
                   r.probes[2]);
  return s;
}

void write_rank1_csv(const fs::path& dir, const Rank1Result& r) {
  fs::create_directories(dir);
  std::string per_view = "set,probe_view,rank1\n", matrix = "set,probe_view,gallery_view,accuracy\n",
              summary = "set,mean_rank1,probes,gallery\n";
  auto num = [](double v) { return std::isnan(v) ? std::string("nan") : fmt::format("{:.4f}", v); };
  for (std::size_t i = 0; i < kProbeSets.size(); ++i) {
    const char* name = probe_set_name(kProbeSets[i]);
    for (std::size_t a = 0; a < r.views.size(); ++a) {
      per_view += fmt::format("{},{},{}\n", name, r.views[a], num(r.per_view[i][a]));
      for (std::size_t b = 0; b < r.views.size(); ++b)
        matrix += fmt::format("{},{},{},{}\n", name, r.views[a], r.views[b], num(r.acc[i][a][b]));
    }
    summary += fmt::format("{},{},{},{}\n", name, num(r.mean[i]), r.probes[i], r.gallery);
  }
  common::write_file_atomic(dir / "rank1_per_view.csv", per_view);
  common::write_file_atomic(dir / "rank1_matrix.csv", matrix);
  common::write_file_atomic(dir / "rank1_summary.csv", summary);
}

namespace {

common::plot::Heatmap rank1_heatmap(const Rank1Result& r, const std::string& title) {
  common::plot::Heatmap h;
  h.title = title;
  h.x_label = "gallery view";
  h.y_label = "probe view";
  h.lo = 0;
  h.hi = 100;
  h.scale_label = "rank-1 accuracy (%) per (probe view, gallery view); grey: excluded";
  h.cell_text = [](double v) { return fmt::format("{:.0f}", v); };
  for (int v : r.views) h.columns.push_back(view_name(v));
  h.rows = h.columns;
  for (std::size_t s = 0; s < kProbeSets.size(); ++s) {
    common::plot::HeatmapPanel p;
    p.title = fmt::format("{} probes: mean {:.2f}%", probe_set_name(kProbeSets[s]), r.mean[s]);
    p.values = r.acc[s];
    p.muted.assign(r.views.size(), std::vector<bool>(r.views.size(), false));
    for (std::size_t a = 0; a < r.views.size(); ++a) p.muted[a][a] = true;  // identical views are excluded
    h.panels.push_back(std::move(p));
  }
  return h;
}

}  // namespace

common::Image render_rank1_heatmap(const Rank1Result& r, const std::string& title) {
  return common::plot::render(rank1_heatmap(r, title));
}

void write_rank1_heatmap(const fs::path& png, const Rank1Result& r, const std::string& title) {
  if (!common::plot::charts_available()) {  // the CSV and JSON reports carry the same figures
    fmt::print(stderr, "{}: skipped, this build draws no charts (PLplot was not found)\n", png.string());
    return;
  }
  common::plot::write_heatmap(rank1_heatmap(r, title), png);
}

nlohmann::json rank1_json(const Rank1Result& r) {
  auto num = [](double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(std::round(v * 100) / 100); };
  nlohmann::json j;
  j["views"] = r.views;
  j["gallery"] = r.gallery;
  for (std::size_t s = 0; s < kProbeSets.size(); ++s) {
    nlohmann::json e;
    e["mean"] = num(r.mean[s]);
    e["probes"] = r.probes[s];
    for (double v : r.per_view[s]) e["per_view"].push_back(num(v));
    j[probe_set_name(kProbeSets[s])] = e;
  }
  return j;
}

std::string format_rank1_by_iteration(const std::vector<Rank1AtIteration>& rows) {
  std::string s = "CASIA-B rank-1 mean accuracy (%) by iteration\n";
  s += fmt::format("{:>10} {:>7} {:>7} {:>7}\n", "iteration", "NM", "BG", "CL");
  for (const Rank1AtIteration& row : rows) {
    s += fmt::format("{:>10}", row.iteration);
    for (double m : row.result.mean) s += fmt::format(" {}", cell(m, 7, 2));
    s += "\n";
  }
  return s;
}

void write_rank1_by_iteration(const fs::path& dir, const std::vector<Rank1AtIteration>& rows,
                              const std::string& title) {
  XS_ASSERT(!rows.empty(), "{}: no evaluated checkpoints to write", dir.string());
  auto num = [](double v) { return std::isnan(v) ? std::string("nan") : fmt::format("{:.4f}", v); };
  std::string csv = "iteration,train_seconds,NM,BG,CL,checkpoint\n";
  nlohmann::json j = nlohmann::json::array();
  for (const Rank1AtIteration& row : rows) {
    csv += fmt::format("{},{:.1f},{},{},{},{}\n", row.iteration, row.train_seconds, num(row.result.mean[0]),
                       num(row.result.mean[1]), num(row.result.mean[2]), row.checkpoint);
    j.push_back({{"iteration", row.iteration},
                 {"train_seconds", row.train_seconds},
                 {"checkpoint", row.checkpoint},
                 {"rank1", rank1_json(row.result)}});
  }
  fs::create_directories(dir);
  common::write_file_atomic(dir / "rank1_by_iteration.csv", csv);
  common::write_file_atomic(dir / "rank1_by_iteration.json", j.dump(2) + "\n");
  const fs::path png = dir / "rank1_by_iteration.png";
  if (!common::plot::charts_available()) {  // the CSV and JSON carry the same figures
    fmt::print(stderr, "{}: skipped, this build draws no charts (PLplot was not found)\n", png.string());
    return;
  }
  common::plot::Chart c;
  c.title = title;
  c.x = {.label = "iteration"};
  c.y = {.label = "rank-1 mean accuracy (%)", .min = 0, .max = 100};
  for (std::size_t s = 0; s < kProbeSets.size(); ++s) {
    common::plot::Series line{.label = probe_set_name(kProbeSets[s])};
    for (const Rank1AtIteration& row : rows) {
      if (std::isnan(row.result.mean[s])) continue;  // a set without probes at this run's views
      line.x.push_back(static_cast<double>(row.iteration));
      line.y.push_back(row.result.mean[s]);
    }
    c.series.push_back(std::move(line));
  }
  common::plot::write_chart(c, png);
}

}  // namespace gait::eval
