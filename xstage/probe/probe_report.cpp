// What `xstage probe` leaves in its output folder (xstage/probe/probe.hpp,
// write_results): the sweep CSV, a JSON summary of the run, the table of rows on
// stdout and the raw sweep's plots (the model's curves come with `xstage plot --params`).
#include <fmt/format.h>

#include <algorithm>

#include "common/files.hpp"
#include "common/plot.hpp"
#include "xstage/bench/report.hpp"
#include "xstage/burstgap/burstgap.hpp"
#include "xstage/probe/probe.hpp"

namespace xstage::probe {

namespace {

nlohmann::json summary(const ProbeResult& res, const ProbeOptions& o, const std::string& command) {
  nlohmann::json j = bench::run_head(res.card, res.gpus, command);
  j.update({{"sm_count", res.sm_count},
            {"copy_engine_GBps", res.copy_engine_GBps},
            {"copy_engine_d2h_GBps", res.copy_engine_d2h_GBps},
            {"clock_offset_ns", res.clock_offset_ns},
            {"ping_rtt_ns", res.ping_rtt_ns},
            {"verified_words", res.verified_words},
            {"fresh_addresses", res.fresh_addresses},
            {"configs", res.rows.size()},
            {"warmup_bursts", o.warmup},
            {"measured_bursts", o.bursts}});
  return j;
}

void print_rows(const std::vector<SweepRow>& rows) {
  const bench::Table t({{"pattern", 9}, {"store", 5}, {"mode", 7}, {"sms", 4}, {"burst", 8}, {"gap_us", 8, ".1f"},
                        {"issue_us", 11, ".3f"}, {"GB/s", 9, ".1f"}, {"visible_us", 11, ".3f"}});
  fmt::print("{}\n", t.header());
  for (const auto& r : rows)
    fmt::print("{}\n", t.line({r.pattern, r.store, r.mode, (long long)r.sms, common::format_bytes(r.burst_bytes),
                               r.gap_ns / 1e3, r.issue_ns_med / 1e3, r.gbps,
                               r.visible_ns_med >= 0 ? bench::Cell(r.visible_ns_med / 1e3) : bench::Cell()}));
}

}  // namespace

void write_results(const ProbeResult& res, const ProbeOptions& o, const std::filesystem::path& out,
                   const std::string& command) {
  common::OutputStage stage(out);  // the files appear together, after the sweep, or not at all
  write_sweep_csv(res.rows, stage.dir() / "sweep.csv");
  common::write_file_atomic(stage.dir() / "probe_summary.json", summary(res, o, command).dump(2) + "\n");
  auto rate = [](double v) { return v > 0 ? fmt::format("{:.1f} GB/s", v) : std::string("not measured"); };
  fmt::print("{} x{}: {} configurations, {} payload words verified, copy engine {} (peer), {} (to host)\n", res.card,
             res.gpus, res.rows.size(), res.verified_words, rate(res.copy_engine_GBps), rate(res.copy_engine_d2h_GBps));
  print_rows(res.rows);
  // Charts need PLplot, which a GPU node may lack; the sweep stands without them. One
  // issue-vs-burst chart per pattern with st16 issue rows (the link's name in the file
  // but for the main one: peer with peers, else local).
  const std::string main_pattern = o.gpus >= 2 ? "peer" : "local";
  bool plots = false;
  for (const std::string pattern : {"local", "peer", "all_peers", "host"}) {
    burstgap::PlotSelection sel;
    sel.pattern = pattern;
    sel.sms = 0;
    const bool has = std::any_of(res.rows.begin(), res.rows.end(), [&](const SweepRow& r) {
      return r.pattern == sel.pattern && r.store == sel.store && r.mode == "issue";
    });
    if (!has || !common::plot::charts_available()) continue;
    const std::string suffix = pattern == main_pattern ? "" : "_" + pattern;
    burstgap::plot_issue_vs_burst(res.rows, nullptr, sel, stage.dir() / ("issue_vs_burst" + suffix + ".png"));
    plots = true;
  }
  if (plots) burstgap::plot_drain_vs_sms(res.rows, nullptr, "st16", stage.dir() / "drain_vs_sms.png");
  stage.commit();
  fmt::print("wrote {}, {}{}\n", (out / "sweep.csv").string(), (out / "probe_summary.json").string(),
             plots ? " and the PNG plots" : " (no charts)");
}

}  // namespace xstage::probe
