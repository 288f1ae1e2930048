// `xstage probe`: a probe sweep on this node's GPUs (probe::run_probe), written to its
// output folder (probe::write_results); `xstage info`: build features and GPUs.
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include <filesystem>
#include <memory>

#include "commands.hpp"
#include "common/check.hpp"
#include "common/files.hpp"
#include "common/plot.hpp"
#include "xstage/probe/probe.hpp"

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
  std::string sweep = "custom";
  std::string patterns = "peer", stores = "st16", modes = "issue", sms = "0", bursts = "16KiB", gaps = "0,10us";
  std::string buffer = "64MiB";
  std::string out = "probe-out";
  bool no_copy_engine = false, quiet = false, force = false;
  probe::ProbeOptions o;
};

// --sweep custom: every combination of the lists (--sms 0: all of the GPU's SMs).
std::vector<probe::ProbeConfig> custom_sweep(const ProbeCli& c, int sm_count) {
  std::vector<probe::ProbeConfig> configs;
  for (const auto& p : split_list(c.patterns))
    for (const auto& st : split_list(c.stores))
      for (const auto& m : split_list(c.modes))
        for (const auto& s : split_list(c.sms))
          for (const auto& b : split_list(c.bursts))
            for (const auto& g : split_list(c.gaps)) {
              const double sms = static_cast<double>(common::parse_bytes(s, "--sms"));
              configs.push_back({.pattern = p, .store = st, .mode = m,
                                 .sms = sms == 0 ? sm_count : static_cast<int>(sms),
                                 .burst_bytes = common::parse_bytes(b, "--burst"),
                                 .gap_ns = common::parse_duration_ns(g, "--gap")});
            }
  return configs;
}

void run(ProbeCli& c) {
  probe::ProbeOptions& o = c.o;
  o.buffer_bytes = common::parse_bytes(c.buffer, "--buffer");
  o.copy_engine = !c.no_copy_engine;
  o.progress = !c.quiet;
  const std::filesystem::path out(c.out);
  XS_ASSERT(c.force || !std::filesystem::exists(out / "sweep.csv"), "{} already exists (use --force to overwrite)",
            (out / "sweep.csv").string());
  cudaDeviceProp prop{};
  XS_ASSERT(cudaGetDeviceProperties(&prop, 0) == cudaSuccess, "no CUDA GPU is visible: the probe needs one");
  XS_ASSERT(c.sweep == "custom" || c.sweep == "standard" || c.sweep == "quick",
            "--sweep '{}': use standard, quick or custom", c.sweep);
  o.configs = c.sweep == "custom" ? custom_sweep(c, prop.multiProcessorCount)
                                  : probe::standard_sweep(o.gpus, prop.multiProcessorCount, c.sweep == "quick");
  probe::write_results(probe::run_probe(o), o, out, command_line());
}

}  // namespace

void add_probe_commands(CLI::App& app) {
  app.add_subcommand("info", "Build features and visible GPUs")->callback([] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    std::string name;
    cudaDeviceProp p{};
    if (n > 0 && cudaGetDeviceProperties(&p, 0) == cudaSuccess) name = p.name;
    fmt::print("cuda: yes\ncharts: {}\nnccl: {}.{}.{}\ngpus: {}\ncard: {}\n", common::plot::charts_available() ? "yes" : "no",
               NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, n, name);
  });
  auto c = std::make_shared<ProbeCli>();
  auto* cmd = app.add_subcommand("probe", "Measure the X-Stage: bursts of remote stores with compute gaps");
  cmd->add_option("--gpus", c->o.gpus, "GPUs (rank 0 sends, the others receive)")->capture_default_str();
  cmd->add_option("--sweep", c->sweep, "standard (model fit), quick, or custom (the lists below)")
      ->capture_default_str();
  cmd->add_option("--pattern", c->patterns, "local,peer,all_peers (comma list)")->capture_default_str();
  cmd->add_option("--store", c->stores, "st4,st8,st16,tma (comma list)")->capture_default_str();
  cmd->add_option("--mode", c->modes, "issue,visible (comma list)")->capture_default_str();
  cmd->add_option("--sms", c->sms, "issuing SMs (comma list; 0 = all)")->capture_default_str();
  cmd->add_option("--burst", c->bursts, "bytes per SM per burst (comma list, e.g. 4KiB,16KiB)")->capture_default_str();
  cmd->add_option("--gap", c->gaps, "compute between bursts (comma list, e.g. 0,2us,10us)")->capture_default_str();
  cmd->add_option("--warmup", c->o.warmup, "unmeasured bursts first")->capture_default_str();
  cmd->add_option("--bursts", c->o.bursts, "measured bursts per SM")->capture_default_str();
  cmd->add_option("--buffer", c->buffer, "payload buffer per GPU")->capture_default_str();
  cmd->add_option("--out", c->out, "output folder (sweep.csv, probe_summary.json)")->capture_default_str();
  cmd->add_flag("--no-copy-engine", c->no_copy_engine, "skip the cudaMemcpyPeer reference");
  cmd->add_flag("--quiet", c->quiet, "no progress bar");
  cmd->add_flag("--force", c->force, "overwrite an existing sweep.csv in --out");
  cmd->callback([c] { run(*c); });
}

}  // namespace xstage::cli
