// `xstage probe-results`: the headline figures of a probe run (or several, one
// per GPU count) as docs/results/probe.json; `xstage host-link-results`: those of the
// host link as docs/results/host_link.json. Both read what `xstage probe` and
// `xstage fit --holdout --report` wrote into a folder: sweep.csv, probe_summary.json,
// params.json, report.json. `xstage moe-results`: the heatmap of a `bench moe --sweep one`
// results file (fused over cuBLAS), without a GPU.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "common/check.hpp"
#include "common/files.hpp"
#include "common/plot.hpp"
#include "common/stats.hpp"
#include "common/validate.hpp"
#include "xstage/bench/moe_bench.hpp"
#include "xstage/bench/ulysses_bench.hpp"
#include "xstage/probe/sweep.hpp"

namespace xstage::cli {

namespace {

nlohmann::json read_json(const std::filesystem::path& p) {
  try {
    return nlohmann::json::parse(common::read_file(p));
  } catch (const nlohmann::json::exception& e) {
    throw common::Error(fmt::format("{}: malformed JSON ({})", p.string(), e.what()));  // the user's file
  }
}

const SweepRow* find_row(const std::vector<SweepRow>& rows, const std::string& pattern, const std::string& store,
                         int sms, double burst, double gap) {
  for (const auto& r : rows)
    if (r.pattern == pattern && r.store == store && r.mode == "issue" && r.sms == sms && r.burst_bytes == burst &&
        r.gap_ns == gap)
      return &r;
  return nullptr;
}

// The headline figures of one probe folder on one link pattern: the backpressure ratio
// (all SMs x 16 KiB, no gap over a gap of `gap_ns` that lets the link recover: 10 us on
// NVLink, 50 us on the host link), the model's errors and the sustained drain.
nlohmann::json one_run(const std::filesystem::path& dir, const std::string& pattern, double gap_ns) {
  const auto summary = read_json(dir / "probe_summary.json");
  const auto params = read_json(dir / "params.json");
  const auto report = read_json(dir / "report.json");
  const auto rows = read_sweep_csv(dir / "sweep.csv");
  const int sms = summary.at("sm_count").get<int>();
  const std::string where = (dir / "sweep.csv").string();
  const std::string gap_key = fmt::format("issue_ns_gap_{}us_median", gap_ns / 1000);
  const SweepRow* no_gap_p = find_row(rows, pattern, "st16", sms, 16384, 0);
  const SweepRow* gap_p = find_row(rows, pattern, "st16", sms, 16384, gap_ns);
  XS_ASSERT(no_gap_p && gap_p, "{}: no issue-mode {} st16 rows at {} SMs x 16 KiB with gaps 0 and {} us "
            "(run the standard sweep)", where, pattern, sms, gap_ns / 1000);
  const SweepRow& no_gap = *no_gap_p;
  const SweepRow& gap = *gap_p;
  // The headline uses 16-byte st.global; every store kind the sweep has is listed too.
  nlohmann::json by_store = nlohmann::json::object();
  for (const char* st : {"st4", "st8", "st16", "tma"}) {
    const SweepRow* a = find_row(rows, pattern, st, sms, 16384, 0);
    const SweepRow* b = find_row(rows, pattern, st, sms, 16384, gap_ns);
    if (a && b) by_store[st] = {{"ratio", a->issue_ns_med / b->issue_ns_med},
                                {"issue_ns_no_gap_median", a->issue_ns_med},
                                {gap_key, b->issue_ns_med}};
  }
  // Sustained drain: all SMs, no gap, the largest burst of the sweep.
  const SweepRow* sustained = nullptr;
  for (const auto& r : rows)
    if (r.pattern == pattern && r.store == "st16" && r.mode == "issue" && r.sms == sms && r.gap_ns == 0 &&
        (!sustained || r.burst_bytes > sustained->burst_bytes))
      sustained = &r;
  XS_ASSERT(sustained, "{}: no sustained (gap 0) {} rows", where, pattern);
  nlohmann::json j;
  for (const char* k : {"card", "gpus", "date", "command"}) j[k] = summary.at(k);
  j["backpressure_ratio"] = no_gap.issue_ns_med / gap.issue_ns_med;
  j["backpressure_ratio_mean"] = no_gap.issue_ns_mean / gap.issue_ns_mean;
  j["issue_ns_no_gap_median"] = no_gap.issue_ns_med;
  j[gap_key] = gap.issue_ns_med;
  j["backpressure_ratio_store"] = "st16";
  j["backpressure_ratio_by_store"] = by_store;
  j["holdout_median_rel_error"] = report.at("holdout").at("median_abs_rel_error");
  j["min_gap_rel_error"] = report.at("min_gap").at("median_rel_error");
  j["min_gap_series_scored"] = report.at("min_gap").at("n_scored");
  j["sustained_drain_GBps"] = sustained->gbps;
  j["sustained_drain_burst_bytes"] = sustained->burst_bytes;
  j["copy_engine_GBps"] = summary.at("copy_engine_GBps");
  if (summary.contains("copy_engine_d2h_GBps")) j["copy_engine_d2h_GBps"] = summary.at("copy_engine_d2h_GBps");
  j["params"] = params;
  return j;
}

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

// A fused-kernel sweep over the host link (`xstage bench ulysses|moe --link host --json`):
// which bench wrote it, the row keys kept, and the row keys of its speedup (predicted and
// measured), with its plot's file and title and the row key of its rank count (one
// colour per count in the plot).
struct SweepSection {
  const char* name;  // key in host_link.json
  const char* bench;
  std::vector<const char*> keys;
  const char *predicted, *measured, *png, *title, *ranks;
  std::vector<const char*> optional_keys = {};  // copied where a row has them (keys added later)
};
const SweepSection kUlyssesSection{
    "ulysses", "xstage bench ulysses --link host",
    {"S", "P", "H", "D", "rank", "fused_guided_ms", "fused_row_major_ms", "exchange_after_ms", "attention_guided_ms",
     "predicted_stall_row_major_us", "predicted_stall_guided_us", "speedup_vs_row_major",
     "predicted_speedup_vs_row_major", "speedup_vs_exchange_after", "stall_predicted", "link_GBps", "bitwise_equal",
     "correct"},
    "predicted_speedup_vs_row_major", "speedup_vs_row_major", "host_link_ulysses_speedup.png",
    "Ulysses over the host link: the advisor's schedule vs row-major", "P",
    {"schedule", "fused_sm_guided_ms", "fused_ce_drain_ms", "predicted_sm_stores_ms", "predicted_ce_drain_ms",
     "attention_row_major_ms", "attention_owner_ms", "fused_ce_owner_ms", "predicted_ce_owner_ms", "drain_chunk_blocks",
     "copy_op_us", "copy_GBps", "hiding_bound_vs_row_major", "sms"}};
const SweepSection kMoeSection{
    "moe", "xstage bench moe --link host",
    {"tokens_per_rank", "experts", "topk", "hidden", "intermediate", "ep", "routing", "expert_wave_us", "interleaved_us",
     "speedup", "predicted_speedup", "predicted_compute_us", "predicted_stall_expert_wave_us",
     "predicted_stall_interleaved_us", "correct"},
    "predicted_speedup", "speedup", "host_link_moe_speedup.png",
    "MoE over the host link: the advisor's schedule vs Expert-Wave", "ep",
    {"predicted_compute_interleaved_us", "expert_wave_drain_us", "interleaved_drain_us", "schedule", "advised_us",
     "predicted_expert_wave_us", "predicted_interleaved_us", "predicted_drain_us", "predicted_drain_expert_wave_us",
     "drain_experts_per_copy", "copy_op_us", "copy_GBps", "read_GBps", "sms", "expert_wave_hbm_us",
     "interleaved_hbm_us"}};

// The section's rows (its keys) and the summary the bench wrote, with its command and date.
nlohmann::json sweep_section(const SweepSection& sec, const std::filesystem::path& file) {
  const auto j = read_json(file);
  XS_ASSERT(j.contains("rows") && j.contains("summary"), "{}: not a results file of `{}` (no rows or summary)",
            file.string(), sec.bench);
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : j.at("rows")) {
    nlohmann::json row;
    for (const char* k : sec.keys) row[k] = r.at(k);
    for (const char* k : sec.optional_keys)
      if (r.contains(k)) row[k] = r.at(k);
    if (r.contains("profile")) row["profile"] = r.at("profile");  // a profiled run's phase shares
    rows.push_back(row);
  }
  nlohmann::json out = j.at("summary");
  out["command"] = j.at("command");
  out["date"] = j.at("date");
  out["rows"] = rows;
  return out;
}

// The MoE section from one or more `bench moe --link host` files (e.g. the standard sweep
// and `--sweep eight`, run one after the other): their rows together, a configuration
// measured twice taken from the later file, and the summary recomputed over all rows.
nlohmann::json moe_section(const std::vector<std::string>& files) {
  nlohmann::json out, rows = nlohmann::json::array(), commands = nlohmann::json::array();
  std::map<std::string, std::size_t> where;  // configuration -> index in rows
  for (const auto& f : files) {
    const nlohmann::json one = sweep_section(kMoeSection, f);
    commands.push_back(one.at("command"));
    out["date"] = one.at("date");
    for (const auto& r : one.at("rows")) {
      const std::string key = moe::config_key(r);
      if (auto it = where.find(key); it != where.end()) rows[it->second] = r;
      else where[key] = rows.size(), rows.push_back(r);
    }
  }
  std::vector<moe::HostLinkRow> parsed;
  for (const auto& r : rows) parsed.push_back(moe::host_link_row_from_json(r));
  out.update(moe::host_link_summary(parsed));
  out["command"] = commands.size() == 1 ? commands[0] : nlohmann::json(commands);
  out["rows"] = rows;
  return out;
}

// One dot per configuration, one colour per rank count: predicted against measured
// speedup (the section's keys of each row), and the diagonal.
void plot_predicted_vs_measured(const nlohmann::json& rows, const SweepSection& sec, const std::string& png) {
  std::map<int, common::plot::Series> by_ranks;
  double lo = 1, hi = 1;
  for (const auto& r : rows) {
    const int p = r.at(sec.ranks).get<int>();
    common::plot::Series& dots =
        by_ranks.try_emplace(p, common::plot::Series{.label = fmt::format("P = {}", p),
                                                     .line = common::plot::LineStyle::none})
            .first->second;
    dots.x.push_back(r.at(sec.predicted).get<double>());
    dots.y.push_back(r.at(sec.measured).get<double>());
    lo = std::min({lo, dots.x.back(), dots.y.back()});
    hi = std::max({hi, dots.x.back(), dots.y.back()});
  }
  common::plot::Chart c;
  c.title = sec.title;
  c.x = {.label = "predicted speedup"};
  c.y = {.label = "measured speedup"};
  for (auto& [p, dots] : by_ranks) c.series.push_back(std::move(dots));
  c.series.push_back({.label = "measured = predicted", .x = {lo * 0.98, hi * 1.02}, .y = {lo * 0.98, hi * 1.02},
                      .line = common::plot::LineStyle::dashed, .marker = common::plot::Marker::none});
  common::plot::write_chart(c, png);
  fmt::print("wrote {}\n", png);
}

// A summary as JSON: median, min, max and how many values (under `count`).
nlohmann::json summary_json(const common::Summary& s, const char* count) {
  return {{"median", s.median}, {"min", s.min}, {"max", s.max}, {count, s.n}};
}

// The MoE section's time-model check (moe::check_expert_wave_predictions): its measured
// rows against the predictions they were measured with and against this build's model
// (the shipped host-link fit, each row's SM count or `sms` for rows without one).
nlohmann::json moe_time_model_check(const nlohmann::json& rows, int sms) {
  std::vector<moe::HostLinkRow> measured;
  for (const auto& r : rows) measured.push_back(moe::host_link_row_from_json(r));
  const auto host = burstgap::read_params_or_default("").find("host", "st16");
  const moe::ModelCheck c = moe::check_expert_wave_predictions(measured, host, sms);
  return {{"what", "Expert-Wave time measured / predicted (compute + stall), per correct row"},
          {"at_measurement", summary_json(c.at_measurement, "rows")},
          {"current_model", summary_json(c.current, "rows")},
          {"speedup_error",
           {{"what", "|predicted / measured speedup - 1|, per correct row"},
            {"at_measurement", summary_json(c.speedup_error_at_measurement, "rows")},
            {"current_model", summary_json(c.speedup_error_current, "rows")}}},
          {"current_model_from", "xstage host-link-results: the rows' configurations re-predicted on the CPU"}};
}

// The Ulysses section's drain-time check (ulysses::check_drain_predictions): its rows'
// measured drains against the predictions they were measured with and against this
// build's model (the shipped host-link fit, each row's SM count or `sms` for rows without
// one). Rows without the drain's keys are left out.
nlohmann::json ulysses_drain_model_check(const nlohmann::json& rows, int sms) {
  std::vector<ulysses::HostLinkRow> parsed;
  for (const auto& j : rows) {
    if (!j.contains("fused_ce_owner_ms") || !j.contains("predicted_ce_owner_ms") || !j.contains("copy_op_us"))
      continue;
    parsed.push_back(ulysses::host_link_row_from_json(j));
  }
  const auto host = burstgap::read_params_or_default("").find("host", "st16");
  const ulysses::DrainModelCheck c = ulysses::check_drain_predictions(parsed, host, sms);
  return {{"what", "copy-engine drain time measured / predicted, the advisor's chunks and one chunk per owner"},
          {"at_measurement", summary_json(c.at_measurement, "predictions")},
          {"current_model", summary_json(c.current, "predictions")},
          {"median_abs_rel_error",
           {{"at_measurement", c.at_measurement_median_abs_rel_error},
            {"current_model", c.current_median_abs_rel_error}}},
          {"current_model_from", "xstage host-link-results: the rows re-predicted on the CPU, the copy rate from "
                                 "copy_GBps or, where a row has none, from its exchange after attention"}};
}

// The Ulysses section's achievable bound (ulysses::set_achievable_bound) on each row with
// the keys it reads, written into the row with the SM count it used (the row's own `sms`,
// else `sms`: a row with neither is an error), and its geomeans into the section.
void ulysses_achievable_bounds(nlohmann::json& section, int sms) {
  std::vector<ulysses::HostLinkRow> parsed;
  for (auto& j : section["rows"]) {
    if (!j.contains("S") || !j.contains("fused_row_major_ms") || !j.contains("attention_guided_ms")) continue;
    ulysses::HostLinkRow r = ulysses::host_link_row_from_json(j);
    if (r.sms <= 0) r.sms = sms;
    XS_ASSERT(r.sms > 0, "host-link-results: the Ulysses row S = {}, P = {}, H = {}, D = {} has no sms; give --sms N "
              "(the SMs of the GPU that measured it)", r.config.seq, r.config.ranks, r.config.heads, r.config.head_dim);
    ulysses::set_achievable_bound(r);
    j["sms"] = r.sms;
    j["achievable_ms"] = r.achievable_ms;
    j["achievable_bound_vs_row_major"] = r.achievable_bound_vs_row_major;
    parsed.push_back(r);
  }
  const ulysses::HostLinkSummary s = ulysses::summarize_host_link(parsed);
  section["achievable_bound_geomean_where_stall_predicted"] = s.achievable_bound_geomean;
  section["speedup_over_achievable_bound_geomean"] = s.speedup_over_achievable_geomean;
}

// host_link.json from what was given; a part not given (the probe, a sweep) is kept from
// the file being rewritten, so one sweep can be re-measured alone.
struct HostLinkInputs {
  std::string probe_dir, ulysses, png_dir, out;
  std::vector<std::string> moe;
  int sms = 0;  // the SMs of the GPU that measured rows without their own
};

void write_host_link_results(const HostLinkInputs& in) {
  if (!in.png_dir.empty()) common::plot::require_charts("host-link-results: --png-dir");
  const nlohmann::json old = std::filesystem::exists(in.out) ? read_json(in.out) : nlohmann::json::object();
  XS_ASSERT(!in.probe_dir.empty() || old.contains("probe"),
            "host-link-results: give --probe (no earlier {} with a probe section to keep)", in.out);
  nlohmann::json j;
  j["probe"] = in.probe_dir.empty() ? old.at("probe") : one_run(in.probe_dir, "host", 50000);
  for (const char* k : {"card", "gpus", "date", "command"}) j[k] = j["probe"].at(k);
  std::vector<double> errors;
  for (const SweepSection* sec : {&kUlyssesSection, &kMoeSection}) {
    const bool given = sec == &kMoeSection ? !in.moe.empty() : !in.ulysses.empty();
    if (given) j[sec->name] = sec == &kMoeSection ? moe_section(in.moe) : sweep_section(*sec, in.ulysses);
    else if (old.contains(sec->name)) j[sec->name] = old.at(sec->name);
    else continue;
    for (const auto& r : j[sec->name]["rows"])
      if (r["correct"].get<bool>())
        errors.push_back(std::abs(r[sec->predicted].get<double>() / r[sec->measured].get<double>() - 1));
    if (!in.png_dir.empty())
      plot_predicted_vs_measured(j[sec->name]["rows"], *sec, (std::filesystem::path(in.png_dir) / sec->png).string());
  }
  if (j.contains("moe")) j["moe"]["time_model_check"] = moe_time_model_check(j["moe"]["rows"], in.sms);
  if (j.contains("ulysses")) {
    j["ulysses"]["drain_model_check"] = ulysses_drain_model_check(j["ulysses"]["rows"], in.sms);
    ulysses_achievable_bounds(j["ulysses"], in.sms);
  }
  // Over every row of the fused-kernel sweeps together.
  j["speedup_prediction_median_abs_rel_error"] = errors.empty() ? nlohmann::json(nullptr)
                                                                : nlohmann::json(common::median(errors));
  common::write_file_atomic(in.out, j.dump(2) + "\n");
  print_run(j["probe"], "host link");
  fmt::print("copy engine device to host {:.1f} GB/s\n", j["probe"].value("copy_engine_d2h_GBps", -1.0));
  for (const char* name : {"ulysses", "moe"})
    if (j.contains(name))
      fmt::print("{}: {} rows, {} with a predicted stall\n", name, j[name]["rows"].size(),
                 j[name]["rows_where_stall_predicted"].get<int>());
  if (!errors.empty())
    fmt::print("predicted speedup's median error over both sweeps {:.1f}%\n", 100 * common::median(errors));
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
  auto in = std::make_shared<HostLinkInputs>();
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
    const nlohmann::json results = read_json(*json);
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
    nlohmann::json runs = nlohmann::json::array();
    for (const auto& d : *dirs) runs.push_back(one_run(d, "peer", 10000));
    // Headline: the first folder's run; every run (e.g. x2 and x4) under "runs".
    nlohmann::json j = runs.front();
    j["runs"] = runs;
    common::write_file_atomic(*out, j.dump(2) + "\n");
    for (const auto& r : runs) {
      print_run(r, "NVLink peer");
      fmt::print("  copy engine {:.0f} GB/s\n", r["copy_engine_GBps"].get<double>());
    }
    fmt::print("wrote {}\n", *out);
  });
  add_host_link_results(app);
  add_moe_results(app);
}

}  // namespace xstage::cli
