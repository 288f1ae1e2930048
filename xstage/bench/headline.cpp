// The results files of docs/results put together from other outputs: probe.json from
// probe folders, host_link.json from a host-link probe folder and the fused kernels'
// host-link sweeps (xstage/include/xstage/bench/headline.hpp).
#include "xstage/bench/headline.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "common/check.hpp"
#include "common/files.hpp"
#include "common/plot.hpp"
#include "common/stats.hpp"
#include "xstage/bench/moe_bench.hpp"
#include "xstage/bench/ulysses_bench.hpp"
#include "xstage/probe/sweep.hpp"

namespace xstage::bench {

namespace {

const SweepRow* find_row(const std::vector<SweepRow>& rows, const std::string& pattern, const std::string& store,
                         int sms, double burst, double gap) {
  for (const auto& r : rows)
    if (r.pattern == pattern && r.store == store && r.mode == "issue" && r.sms == sms && r.burst_bytes == burst &&
        r.gap_ns == gap)
      return &r;
  return nullptr;
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
  const auto j = read_json_file(file);
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

}  // namespace

nlohmann::json probe_run_figures(const std::filesystem::path& dir, const std::string& pattern, double recovery_gap_ns) {
  const auto summary = read_json_file(dir / "probe_summary.json");
  const auto params = read_json_file(dir / "params.json");
  const auto report = read_json_file(dir / "report.json");
  const auto rows = read_sweep_csv(dir / "sweep.csv");
  const int sms = summary.at("sm_count").get<int>();
  const std::string where = (dir / "sweep.csv").string();
  const std::string gap_key = fmt::format("issue_ns_gap_{}us_median", recovery_gap_ns / 1000);
  const SweepRow* no_gap_p = find_row(rows, pattern, "st16", sms, 16384, 0);
  const SweepRow* gap_p = find_row(rows, pattern, "st16", sms, 16384, recovery_gap_ns);
  XS_ASSERT(no_gap_p && gap_p, "{}: no issue-mode {} st16 rows at {} SMs x 16 KiB with gaps 0 and {} us "
            "(run the standard sweep)", where, pattern, sms, recovery_gap_ns / 1000);
  const SweepRow& no_gap = *no_gap_p;
  const SweepRow& gap = *gap_p;
  // The headline uses 16-byte st.global; every store kind the sweep has is listed too.
  nlohmann::json by_store = nlohmann::json::object();
  for (const char* st : {"st4", "st8", "st16", "tma"}) {
    const SweepRow* a = find_row(rows, pattern, st, sms, 16384, 0);
    const SweepRow* b = find_row(rows, pattern, st, sms, 16384, recovery_gap_ns);
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

nlohmann::json probe_results(const std::vector<std::filesystem::path>& dirs) {
  XS_ASSERT(!dirs.empty(), "probe results: no probe folder");
  nlohmann::json runs = nlohmann::json::array();
  for (const auto& d : dirs) runs.push_back(probe_run_figures(d, "peer", 10000));
  nlohmann::json j = runs.front();
  j["runs"] = runs;
  return j;
}

HostLinkResults host_link_results(const HostLinkInputs& in) {
  HostLinkResults res;
  if (!in.png_dir.empty()) common::plot::require_charts("host-link-results: --png-dir");
  const nlohmann::json old = std::filesystem::exists(in.out) ? read_json_file(in.out) : nlohmann::json::object();
  XS_ASSERT(!in.probe_dir.empty() || old.contains("probe"),
            "host-link-results: give --probe (no earlier {} with a probe section to keep)", in.out);
  nlohmann::json& j = res.json;
  j["probe"] = in.probe_dir.empty() ? old.at("probe") : probe_run_figures(in.probe_dir, "host", 50000);
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
    if (!in.png_dir.empty()) {
      res.pngs.push_back((std::filesystem::path(in.png_dir) / sec->png).string());
      plot_predicted_vs_measured(j[sec->name]["rows"], *sec, res.pngs.back());
    }
  }
  if (j.contains("moe")) j["moe"]["time_model_check"] = moe_time_model_check(j["moe"]["rows"], in.sms);
  if (j.contains("ulysses")) {
    j["ulysses"]["drain_model_check"] = ulysses_drain_model_check(j["ulysses"]["rows"], in.sms);
    ulysses_achievable_bounds(j["ulysses"], in.sms);
  }
  // Over every row of the fused-kernel sweeps together.
  j["speedup_prediction_median_abs_rel_error"] = errors.empty() ? nlohmann::json(nullptr)
                                                                : nlohmann::json(common::median(errors));
  return res;
}

}  // namespace xstage::bench
