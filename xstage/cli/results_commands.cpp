// `xstage probe-results` (docs/results/probe.json) and `xstage host-link-results`
// (docs/results/host_link.json): their files put together by xstage/bench/headline.hpp,
// written and summarised; `xstage moe-results`: the heatmap of a `bench moe --sweep one`
// results file (fused over cuBLAS), without a GPU.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "common/check.hpp"
#include "common/files.hpp"
#include "common/plot.hpp"
#include "common/validate.hpp"
#include "xstage/bench/headline.hpp"
#include "xstage/bench/moe_bench.hpp"

namespace xstage::cli {

namespace {

void print_run(const nlohmann::json& r, const std::string& link) {
  fmt::print("{} x{} {}: backpressure ratio {:.2f} st16 (mean {:.2f}; tma {:.2f}), holdout MdAPE {:.1f}%, "
             "min-gap error {:.1f}%, sustained drain {:.1f} GB/s\n",
             r["card"].get<std::string>(), r["gpus"].get<int>(), link, r["backpressure_ratio"].get<double>(),
             r["backpressure_ratio_mean"].get<double>(),
             r["backpressure_ratio_by_store"].contains("tma") ? r["backpressure_ratio_by_store"]["tma"]["ratio"].get<double>()
                                                              : -1.0,
             100 * r["holdout_median_rel_error"].get<double>(), 100 * r["min_gap_rel_error"].get<double>(),
             r["sustained_drain_GBps"].get<double>());
}

void write_host_link_results(const bench::HostLinkInputs& in) {
  const bench::HostLinkResults res = bench::host_link_results(in);
  const nlohmann::json& j = res.json;
  for (const auto& png : res.pngs) fmt::print("wrote {}\n", png);
  common::write_file_atomic(in.out, j.dump(2) + "\n");
  print_run(j["probe"], "host link");
  fmt::print("copy engine device to host {:.1f} GB/s\n", j["probe"].value("copy_engine_d2h_GBps", -1.0));
  for (const char* name : {"ulysses", "moe"})
    if (j.contains(name))
      fmt::print("{}: {} rows, {} with a predicted stall\n", name, j[name]["rows"].size(),
                 j[name]["rows_where_stall_predicted"].get<int>());
  if (!j["speedup_prediction_median_abs_rel_error"].is_null())
    fmt::print("predicted speedup's median error over both sweeps {:.1f}%\n",
               100 * j["speedup_prediction_median_abs_rel_error"].get<double>());
  if (j.contains("ulysses")) {
    const auto& u = j.at("ulysses");
    if (u.at("achievable_bound_geomean_where_stall_predicted").get<double>() > 0)
      fmt::print("Ulysses: the achievable bound at the kernel's tile granularity {:.3f} (geomean), the advisor's "
                 "schedule reaches {:.3f} of it\n",
                 u.at("achievable_bound_geomean_where_stall_predicted").get<double>(),
                 u.at("speedup_over_achievable_bound_geomean").get<double>());
    const auto& e = u.at("drain_model_check").at("median_abs_rel_error");
    if (e.at("current_model").get<double>() >= 0)
      fmt::print("Ulysses drain time, measured / predicted, median error: {:.1f}% with the model of the run, {:.1f}% "
                 "with this build's\n",
                 100 * e.at("at_measurement").get<double>(), 100 * e.at("current_model").get<double>());
  }
  if (j.contains("moe")) {
    const auto& c = j["moe"]["time_model_check"];
    fmt::print("MoE Expert-Wave time, measured / predicted: {:.2f} ({:.2f}-{:.2f}) with the model of the run, "
               "{:.2f} ({:.2f}-{:.2f}) with this build's\n",
               c["at_measurement"]["median"].get<double>(), c["at_measurement"]["min"].get<double>(),
               c["at_measurement"]["max"].get<double>(), c["current_model"]["median"].get<double>(),
               c["current_model"]["min"].get<double>(), c["current_model"]["max"].get<double>());
    const auto& e = c["speedup_error"];
    fmt::print("MoE predicted speedup's median error: {:.1f}% with the model of the run, {:.1f}% with this build's\n",
               100 * e["at_measurement"]["median"].get<double>(), 100 * e["current_model"]["median"].get<double>());
  }
  fmt::print("wrote {}\n", in.out);
}

void add_host_link_results(CLI::App& app) {
  auto in = std::make_shared<bench::HostLinkInputs>();
  in->out = "docs/results/host_link.json";
  auto* cmd = app.add_subcommand("host-link-results", "Headline figures of the host link as one JSON file");
  cmd->add_option("--probe", in->probe_dir, "probe folder of `xstage probe --pattern host` with params.json and "
                  "report.json from `xstage fit --holdout` (default: keep the --out file's probe section)")
      ->check(common::validate::existing_folder());
  cmd->add_option("--ulysses", in->ulysses, "results file of `xstage bench ulysses --link host --json` "
                  "(default: keep the --out file's section)")->check(CLI::ExistingFile);
  cmd->add_option("--moe", in->moe, "results file(s) of `xstage bench moe --link host --json`, repeatable: their rows "
                  "together, a configuration in two files from the later (default: keep the --out file's section)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--sms", in->sms, "SM count of the GPU that measured rows without their own `sms` (rows of "
                  "older benches; 132 on H200), for the Ulysses achievable bound's rounds and the re-predicted rows")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--png-dir", in->png_dir, "folder for the predicted-against-measured speedup plots (needs PLplot)")
      ->check(common::validate::existing_folder());
  cmd->add_option("-o,--out", in->out, "JSON to (re)write")->check(common::validate::output_file())
      ->capture_default_str();
  cmd->callback([in] { write_host_link_results(*in); });
}

// `xstage moe-results`: the `--sweep one` heatmap of `xstage bench moe` from its results
// file, without a GPU.
void add_moe_results(CLI::App& app) {
  auto json = std::make_shared<std::string>("docs/results/moe.json");
  auto png = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("moe-results", "Charts of a `bench moe --sweep one` results file, on the host: "
                                 "fused over cuBLAS by shape and tokens");
  cmd->add_option("--json", *json, "results file of `xstage bench moe --sweep one`")->check(CLI::ExistingFile)
      ->capture_default_str();
  cmd->add_option("--png", *png, "heatmap to write")->required()->check(common::validate::output_file());
  cmd->callback([json, png] {
    common::plot::require_charts("moe-results --png " + *png);
    const nlohmann::json results = bench::read_json_file(*json);
    try {
      moe::write_cublas_heatmap(results, *png);
    } catch (const common::Error& e) {
      throw common::Error(fmt::format("{}: {}", *json, e.what()));
    }
    fmt::print("wrote {}\n", *png);
  });
}

}  // namespace

void add_results_commands(CLI::App& app) {
  auto dirs = std::make_shared<std::vector<std::string>>();
  auto out = std::make_shared<std::string>("docs/results/probe.json");
  auto* cmd = app.add_subcommand("probe-results", "Headline probe/model figures of probe runs as one JSON file");
  cmd->add_option("dirs", *dirs, "probe output folders (sweep.csv, probe_summary.json, params.json, report.json)")
      ->required()->check(common::validate::existing_folder());
  cmd->add_option("-o,--out", *out, "JSON to (re)write")->check(common::validate::output_file())
      ->capture_default_str();
  cmd->callback([dirs, out] {
    const nlohmann::json j = bench::probe_results({dirs->begin(), dirs->end()});
    common::write_file_atomic(*out, j.dump(2) + "\n");
    for (const auto& r : j["runs"]) {
      print_run(r, "NVLink peer");
      fmt::print("  copy engine {:.0f} GB/s\n", r["copy_engine_GBps"].get<double>());
    }
    fmt::print("wrote {}\n", *out);
  });
  add_host_link_results(app);
  add_moe_results(app);
}

}  // namespace xstage::cli
