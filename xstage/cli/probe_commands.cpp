// `xstage probe`: run a probe sweep on this node's GPUs and write the sweep CSV
// plus a JSON summary (card, GPUs, date, copy-engine bandwidth, clock offsets).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include <cuda_runtime.h>
#include <nccl.h>

#include "common/check.hpp"
#include "common/files.hpp"
#include "xstage/burstgap.hpp"
#include "xstage/probe.hpp"

namespace xstage::cli {

namespace {

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    const auto comma = s.find(',', start);
    out.push_back(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

struct ProbeCli {
  int gpus = 2;
  std::string sweep = "custom";
  std::string patterns = "peer", stores = "st16", modes = "issue", sms = "0", bursts = "16KiB", gaps = "0,10us";
  int warmup = 16, measured = 64;
  std::string buffer = "64MiB";
  std::string out = "probe-out";
  bool no_copy_engine = false, quiet = false, force = false;
};

void run(const ProbeCli& c, const std::string& command_line) {
  probe::ProbeOptions o;
  o.gpus = c.gpus;
  o.warmup = c.warmup;
  o.bursts = c.measured;
  o.buffer_bytes = common::parse_bytes(c.buffer, "--buffer");
  o.copy_engine = !c.no_copy_engine;
  o.progress = !c.quiet;
  const std::filesystem::path out(c.out);
  XS_ASSERT(c.force || !std::filesystem::exists(out / "sweep.csv"),
            "{} already exists (use --force to overwrite)", (out / "sweep.csv").string());
  const int sm_count = [&] {
    cudaDeviceProp p{};
    XS_ASSERT(cudaGetDeviceProperties(&p, 0) == cudaSuccess, "no CUDA GPU is visible: the probe needs one");
    return p.multiProcessorCount;
  }();
  if (c.sweep == "standard" || c.sweep == "quick") {
    o.configs = probe::standard_sweep(c.gpus, sm_count, c.sweep == "quick");
  } else {
    XS_ASSERT(c.sweep == "custom", "--sweep '{}': use standard, quick or custom", c.sweep);
    for (const auto& p : split_list(c.patterns))
      for (const auto& st : split_list(c.stores))
        for (const auto& m : split_list(c.modes))
          for (const auto& s : split_list(c.sms))
            for (const auto& b : split_list(c.bursts))
              for (const auto& g : split_list(c.gaps)) {
                probe::ProbeConfig pc;
                pc.pattern = p;
                pc.store = st;
                pc.mode = m;
                const double sms_v = static_cast<double>(common::parse_bytes(s, "--sms"));
                pc.sms = sms_v == 0 ? sm_count : static_cast<int>(sms_v);
                pc.burst_bytes = common::parse_bytes(b, "--burst");
                pc.gap_ns = common::parse_duration_ns(g, "--gap");
                o.configs.push_back(pc);
              }
  }
  const auto res = probe::run_probe(o);
  write_sweep_csv(res.rows, out / "sweep.csv");
  nlohmann::json j;
  j["card"] = res.card;
  j["gpus"] = res.gpus;
  j["sm_count"] = res.sm_count;
  j["date"] = today_utc();
  j["command"] = command_line;
  j["copy_engine_GBps"] = res.copy_engine_GBps;
  j["clock_offset_ns"] = res.clock_offset_ns;
  j["ping_rtt_ns"] = res.ping_rtt_ns;
  j["verified_words"] = res.verified_words;
  j["configs"] = res.rows.size();
  j["warmup_bursts"] = o.warmup;
  j["measured_bursts"] = o.bursts;
  common::write_file_atomic(out / "probe_summary.json", j.dump(2) + "\n");
  fmt::print("{} x{}: {} configurations, {} payload words verified, copy engine {}\n", res.card, res.gpus,
             res.rows.size(), res.verified_words,
             res.copy_engine_GBps > 0 ? fmt::format("{:.1f} GB/s", res.copy_engine_GBps) : std::string("not measured"));
  fmt::print("{:>9} {:>5} {:>7} {:>4} {:>8} {:>8} {:>11} {:>9} {:>11}\n", "pattern", "store", "mode", "sms", "burst",
             "gap_us", "issue_us", "GB/s", "visible_us");
  for (const auto& r : res.rows)
    fmt::print("{:>9} {:>5} {:>7} {:>4} {:>8} {:>8.1f} {:>11.3f} {:>9.1f} {:>11}\n", r.pattern, r.store, r.mode,
               r.sms, common::format_bytes(r.burst_bytes), r.gap_ns / 1e3, r.issue_ns_med / 1e3, r.gbps,
               r.visible_ns_med >= 0 ? fmt::format("{:.3f}", r.visible_ns_med / 1e3) : std::string("-"));
  // Plots of the raw sweep (the model's curves come with `xstage plot --params`).
  burstgap::PlotSelection sel;
  sel.pattern = o.gpus >= 2 ? "peer" : "local";
  sel.sms = 0;
  const bool has_sel = std::any_of(res.rows.begin(), res.rows.end(), [&](const SweepRow& r) {
    return r.pattern == sel.pattern && r.store == sel.store && r.mode == "issue";
  });
  if (has_sel) {
    burstgap::plot_issue_vs_burst(res.rows, nullptr, sel, out / "issue_vs_burst.png");
    burstgap::plot_drain_vs_sms(res.rows, nullptr, "st16", out / "drain_vs_sms.png");
  }
  fmt::print("wrote {}, {}{}\n", (out / "sweep.csv").string(), (out / "probe_summary.json").string(),
             has_sel ? " and the PNG plots" : "");
}

}  // namespace

void add_probe_commands(CLI::App& app) {
  app.add_subcommand("info", "Build features and visible GPUs")->callback([] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    std::string name;
    if (n > 0) {
      cudaDeviceProp p{};
      if (cudaGetDeviceProperties(&p, 0) == cudaSuccess) name = p.name;
    }
    fmt::print("cuda: yes\nnccl: {}.{}.{}\ngpus: {}\ncard: {}\n", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, n, name);
  });
  auto c = std::make_shared<ProbeCli>();
  auto* cmd = app.add_subcommand("probe", "Measure the X-Stage: bursts of remote stores with compute gaps");
  cmd->add_option("--gpus", c->gpus, "GPUs (rank 0 sends, the others receive)")->capture_default_str();
  cmd->add_option("--sweep", c->sweep, "standard (model fit), quick, or custom (the lists below)")
      ->capture_default_str();
  cmd->add_option("--pattern", c->patterns, "local,peer,all_peers (comma list)")->capture_default_str();
  cmd->add_option("--store", c->stores, "st4,st8,st16,tma (comma list)")->capture_default_str();
  cmd->add_option("--mode", c->modes, "issue,visible (comma list)")->capture_default_str();
  cmd->add_option("--sms", c->sms, "issuing SMs (comma list; 0 = all)")->capture_default_str();
  cmd->add_option("--burst", c->bursts, "bytes per SM per burst (comma list, e.g. 4KiB,16KiB)")->capture_default_str();
  cmd->add_option("--gap", c->gaps, "compute between bursts (comma list, e.g. 0,2us,10us)")->capture_default_str();
  cmd->add_option("--warmup", c->warmup, "unmeasured bursts first")->capture_default_str();
  cmd->add_option("--bursts", c->measured, "measured bursts per SM")->capture_default_str();
  cmd->add_option("--buffer", c->buffer, "payload buffer per GPU")->capture_default_str();
  cmd->add_option("--out", c->out, "output folder (sweep.csv, probe_summary.json)")->capture_default_str();
  cmd->add_flag("--no-copy-engine", c->no_copy_engine, "skip the cudaMemcpyPeer reference");
  cmd->add_flag("--quiet", c->quiet, "no progress bar");
  cmd->add_flag("--force", c->force, "overwrite an existing sweep.csv in --out");
  cmd->callback([c] { run(*c, command_line()); });
}

}  // namespace xstage::cli
