#include <fmt/format.h>

#include "common/check.hpp"
#include "common/csv.hpp"
#include "common/files.hpp"
#include "common/validate.hpp"
#include "xstage/probe/sweep.hpp"

namespace xstage {

namespace {
constexpr const char* kHeader =
    "gpus,pattern,store,mode,sms,burst_bytes,gap_ns,bursts,issue_ns_med,issue_ns_p10,issue_ns_p90,"
    "issue_ns_mean,period_ns_med,period_ns_mean,gbps,visible_ns_med,visible_ns_p10,visible_ns_p90,drain_ns_med,warmup";
}

bool is_valid_pattern(const std::string& s) {
  return s == "local" || s == "peer" || s == "all_peers" || s == "host";
}
bool is_valid_store(const std::string& s) { return s == "st4" || s == "st8" || s == "st16" || s == "tma"; }

std::vector<SweepRow> parse_sweep_csv(const std::string& text, const std::string& source_name) {
  const auto t = common::CsvTable::parse(text, source_name);
  // Every column a sweep has had since the first one (issue_ns_mean, period_ns_mean and
  // warmup came later and are optional): a missing one is named with the header it has.
  common::validate::columns(t, {"gpus", "pattern", "store", "mode", "sms", "burst_bytes", "gap_ns", "bursts",
                                "issue_ns_med", "issue_ns_p10", "issue_ns_p90", "period_ns_med", "gbps",
                                "visible_ns_med", "visible_ns_p10", "visible_ns_p90", "drain_ns_med"});
  std::vector<SweepRow> rows;
  auto col = [&](const char* name) { return t.column(name); };
  // Columns added after the first sweeps were recorded: -1 (not measured) when absent.
  auto opt = [&](std::size_t row, const char* name) { return t.has_column(name) ? t.number(row, t.column(name)) : -1.0; };
  const auto c_gpus = col("gpus"), c_pattern = col("pattern"), c_store = col("store"), c_mode = col("mode"),
             c_sms = col("sms"), c_burst = col("burst_bytes"), c_gap = col("gap_ns"), c_bursts = col("bursts"),
             c_im = col("issue_ns_med"), c_i10 = col("issue_ns_p10"), c_i90 = col("issue_ns_p90"),
             c_per = col("period_ns_med"), c_gbps = col("gbps"), c_vm = col("visible_ns_med"),
             c_v10 = col("visible_ns_p10"), c_v90 = col("visible_ns_p90"), c_dr = col("drain_ns_med");
  for (std::size_t i = 0; i < t.rows(); ++i) {
    SweepRow r;
    const std::string where = fmt::format("{} row {}", source_name, i + 1);
    r.gpus = static_cast<int>(t.integer(i, c_gpus));
    r.pattern = t.cell(i, c_pattern);
    r.store = t.cell(i, c_store);
    r.mode = t.cell(i, c_mode);
    r.sms = static_cast<int>(t.integer(i, c_sms));
    r.burst_bytes = t.number(i, c_burst);
    r.gap_ns = t.number(i, c_gap);
    r.bursts = static_cast<int>(t.integer(i, c_bursts));
    r.issue_ns_med = t.number(i, c_im);
    r.issue_ns_p10 = t.number(i, c_i10);
    r.issue_ns_p90 = t.number(i, c_i90);
    r.issue_ns_mean = opt(i, "issue_ns_mean");
    r.period_ns_med = t.number(i, c_per);
    r.period_ns_mean = opt(i, "period_ns_mean");
    r.gbps = t.number(i, c_gbps);
    r.visible_ns_med = t.number(i, c_vm);
    r.visible_ns_p10 = t.number(i, c_v10);
    r.visible_ns_p90 = t.number(i, c_v90);
    r.drain_ns_med = t.number(i, c_dr);
    r.warmup = t.has_column("warmup") ? static_cast<int>(t.integer(i, t.column("warmup"))) : 8;
    XS_ASSERT(r.gpus >= 1, "{}: gpus must be >= 1", where);
    XS_ASSERT(is_valid_pattern(r.pattern), "{}: unknown pattern '{}' (local, peer, all_peers, host)", where, r.pattern);
    XS_ASSERT(is_valid_store(r.store), "{}: unknown store '{}' (st4, st8, st16, tma)", where, r.store);
    XS_ASSERT(r.mode == "issue" || r.mode == "visible", "{}: unknown mode '{}' (issue, visible)", where, r.mode);
    XS_ASSERT(r.sms >= 1, "{}: sms must be >= 1", where);
    XS_ASSERT(r.burst_bytes > 0, "{}: burst_bytes must be > 0", where);
    XS_ASSERT(r.gap_ns >= 0, "{}: gap_ns must be >= 0", where);
    XS_ASSERT(r.bursts >= 1, "{}: bursts must be >= 1", where);
    XS_ASSERT(r.warmup >= 0, "{}: warmup must be >= 0", where);
    XS_ASSERT(r.issue_ns_med > 0, "{}: issue_ns_med must be > 0", where);
    XS_ASSERT(r.issue_ns_mean > 0 || r.issue_ns_mean == -1, "{}: issue_ns_mean must be > 0 (or -1)", where);
    rows.push_back(std::move(r));
  }
  XS_ASSERT(!rows.empty(), "{}: no sweep rows", source_name);
  return rows;
}

std::vector<SweepRow> read_sweep_csv(const std::filesystem::path& path) {
  return parse_sweep_csv(common::read_file(path), path.string());
}

std::string format_sweep_csv(const std::vector<SweepRow>& rows) {
  std::string out = std::string(kHeader) + "\n";
  for (const auto& r : rows) {
    out += fmt::format("{},{},{},{},{},{:.0f},{:.0f},{},{:.1f},{:.1f},{:.1f},{:.1f},{:.1f},{:.1f},{:.2f},{:.1f},{:.1f},{:.1f},{:.1f},{}\n",
                       r.gpus, r.pattern, r.store, r.mode, r.sms, r.burst_bytes, r.gap_ns, r.bursts, r.issue_ns_med,
                       r.issue_ns_p10, r.issue_ns_p90, r.issue_ns_mean, r.period_ns_med, r.period_ns_mean, r.gbps, r.visible_ns_med, r.visible_ns_p10,
                       r.visible_ns_p90, r.drain_ns_med, r.warmup);
  }
  return out;
}

void write_sweep_csv(const std::vector<SweepRow>& rows, const std::filesystem::path& path) {
  common::write_file_atomic(path, format_sweep_csv(rows));
}

}  // namespace xstage
