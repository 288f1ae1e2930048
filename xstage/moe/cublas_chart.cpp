// The `--sweep one` rows against cuBLAS as a heatmap (cublas_heatmap), from the rows of
// a results file: the bench draws it at the end of a run, `xstage moe-results` from a
// file on the host.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "common/check.hpp"
#include "common/plot.hpp"
#include "xstage/bench/moe_bench.hpp"

namespace xstage::moe {

namespace {

using Shape = std::tuple<int, int, int, int>;  // experts, top-k, hidden, intermediate

std::string shape_name(const Shape& s) {
  return fmt::format("E {} k {} {}x{}", std::get<0>(s), std::get<1>(s), std::get<2>(s), std::get<3>(s));
}

// One panel: `key` of the rows of one routing, by shape and tokens (NaN: no correct row).
common::plot::HeatmapPanel panel(const std::vector<const nlohmann::json*>& rows, const std::string& key,
                                 const std::string& title, const std::vector<Shape>& shapes,
                                 const std::vector<int>& tokens) {
  common::plot::HeatmapPanel p{.title = title, .values = {}, .muted = {}};
  p.values.assign(shapes.size(), std::vector<double>(tokens.size(), NAN));
  for (const nlohmann::json* r : rows) {
    const Shape s{r->at("experts").get<int>(), r->at("topk").get<int>(), r->at("hidden").get<int>(),
                  r->at("intermediate").get<int>()};
    const auto si = std::find(shapes.begin(), shapes.end(), s) - shapes.begin();
    const auto ti = std::find(tokens.begin(), tokens.end(), r->at("tokens_per_rank").get<int>()) - tokens.begin();
    const double v = r->value(key, 0.0);
    if (r->value("correct", false) && v > 0) p.values[si][ti] = v;
  }
  return p;
}

common::plot::Heatmap heatmap_of(const nlohmann::json& results) {
  if (!results.is_object() || !results.contains("rows") || !results["rows"].is_array())
    throw common::Error("moe chart: the results have no \"rows\" array");
  std::map<std::string, std::vector<const nlohmann::json*>> by_routing;
  std::set<Shape> shapes;
  std::set<int> tokens;
  for (const auto& r : results["rows"]) {
    if (r.value("ep", 0) != 1 || !r.contains("fused_over_cublas")) continue;
    for (const char* key : {"experts", "topk", "hidden", "intermediate", "tokens_per_rank", "routing"})
      if (!r.contains(key)) throw common::Error(fmt::format("moe chart: an EP = 1 row has no \"{}\"", key));
    by_routing[r["routing"].get<std::string>()].push_back(&r);
    shapes.insert({r["experts"].get<int>(), r["topk"].get<int>(), r["hidden"].get<int>(),
                   r["intermediate"].get<int>()});
    tokens.insert(r["tokens_per_rank"].get<int>());
  }
  if (by_routing.empty())
    throw common::Error("moe chart: no EP = 1 rows with a cuBLAS figure (those of `xstage bench moe --sweep one`)");
  common::plot::Heatmap h{
      .title = fmt::format("fused MoE over cuBLAS's expert GEMMs, EP = 1 ({})",
                           results.value("one_gpu_card", results.value("card", std::string("GPU")))),
      .x_label = "tokens",
      .y_label = "experts, top-k, hidden x intermediate",
      .lo = 0.5,
      .hi = 1.5,
      .scale_label = "cuBLAS time / fused time (> 1: fused faster); grey: no correct row",
      .cell_text = [](double v) { return fmt::format("{:.2f}", v); }};
  const std::vector<Shape> shape_list(shapes.begin(), shapes.end());
  const std::vector<int> token_list(tokens.begin(), tokens.end());
  for (const auto& t : token_list) h.columns.push_back(std::to_string(t));
  for (const auto& s : shape_list) h.rows.push_back(shape_name(s));
  // Uniform routing (the headline figures) first, then the others by name.
  std::vector<std::string> routings;
  if (by_routing.contains("uniform")) routings.push_back("uniform");
  for (const auto& [routing, rows] : by_routing)
    if (routing != "uniform") routings.push_back(routing);
  for (const auto& routing : routings) {
    const auto& rows = by_routing.at(routing);
    h.panels.push_back(panel(rows, "fused_over_cublas", routing + ", mean count", shape_list, token_list));
    h.panels.push_back(panel(rows, "fused_over_cublas_exact", routing + ", own counts", shape_list, token_list));
  }
  return h;
}

}  // namespace

common::plot::Heatmap cublas_heatmap(const nlohmann::json& results) {
  try {
    return heatmap_of(results);
  } catch (const nlohmann::json::exception& e) {  // a field of the wrong type
    throw common::Error(fmt::format("moe chart: an EP = 1 row has a field of the wrong type ({})", e.what()));
  }
}

void write_cublas_heatmap(const nlohmann::json& results, const std::filesystem::path& png) {
  common::plot::write_heatmap(cublas_heatmap(results), png);
}

}  // namespace xstage::moe
