// `xstage probe`: a probe sweep on this node's GPUs (probe::run_probe), written to its
// output folder (probe::write_results); `xstage info`: build features and GPUs.
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nccl.h>

#include <algorithm>
#include <filesystem>
#include <memory>

#include "commands.hpp"
#include "common/check.hpp"
#include "common/files.hpp"
#include "common/plot.hpp"
#include "common/validate.hpp"
#include "xstage/probe/probe.hpp"

namespace xstage::cli {

int needs_gpu(const std::string& command, const std::string& hint) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err == cudaSuccess && n > 0) return n;
  const std::string why = err == cudaSuccess ? "0 devices" : cudaGetErrorName(err);
  throw common::Error(fmt::format("{}: needs a CUDA GPU: none visible ({}){}", command, why,
                                  hint.empty() ? "" : "; " + hint));
}

namespace {

namespace v = common::validate;

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
  std::string patterns, stores = "st16", modes = "issue", sms = "0", bursts = "16KiB", gaps = "0,10us";
  std::string buffer = "64MiB";
  std::string out = "probe-out";
  bool no_copy_engine = false, same_addresses = false, quiet = false, force = false;
  probe::ProbeOptions o;
};

// A comma list of names: each one of `allowed`, none twice.
std::vector<std::string> name_list(const std::string& s, const char* option, const std::vector<std::string>& allowed) {
  auto items = split_list(s);
  for (const auto& item : items)
    XS_ASSERT(std::find(allowed.begin(), allowed.end(), item) != allowed.end(), "{}: '{}' is not one of {}", option,
              item, fmt::join(allowed, ", "));
  unique_items(items, option);
  return items;
}

std::vector<std::string> pattern_list(const std::string& s) {
  return name_list(s, "--pattern", {"local", "peer", "all_peers", "host"});
}

// A comma list of numbers parsed by `parse` (which names the option on bad text), none twice.
template <class F>
auto number_list(const std::string& s, const char* option, F parse) {
  std::vector<decltype(parse(std::string{}))> out;
  for (const auto& item : split_list(s)) out.push_back(parse(item));
  unique_items(out, option);
  return out;
}

// --sweep custom: every combination of the lists (--sms 0: all of the GPU's SMs).
std::vector<probe::ProbeConfig> custom_sweep(const ProbeCli& c, int sm_count) {
  const auto patterns = pattern_list(c.patterns.empty() ? "peer" : c.patterns);
  const auto stores = name_list(c.stores, "--store", {"st4", "st8", "st16", "tma"});
  const auto modes = name_list(c.modes, "--mode", {"issue", "visible"});
  const auto sms = number_list(c.sms, "--sms", [](const std::string& s) {
    const double n = static_cast<double>(common::parse_bytes(s, "--sms"));
    v::in_range(n, 0, 1024, "--sms", "SMs");  // 0: all of the GPU's SMs
    return static_cast<int>(n);
  });
  const auto bursts = number_list(c.bursts, "--burst", [](const std::string& s) {
    const std::size_t b = common::parse_bytes(s, "--burst");
    XS_ASSERT(b > 0, "--burst: '{}' is zero bytes", s);
    return b;
  });
  const auto gaps = number_list(c.gaps, "--gap", [](const std::string& s) { return common::parse_duration_ns(s, "--gap"); });
  std::vector<probe::ProbeConfig> configs;
  for (const auto& p : patterns)
    for (const auto& st : stores)
      for (const auto& m : modes)
        for (const int s : sms)
          for (const std::size_t b : bursts)
            for (const double g : gaps)
              configs.push_back({.pattern = p, .store = st, .mode = m, .sms = s == 0 ? sm_count : s,
                                 .burst_bytes = b, .gap_ns = g});
  return configs;
}

void run(ProbeCli& c) {
  probe::ProbeOptions& o = c.o;
  o.buffer_bytes = common::parse_bytes(c.buffer, "--buffer");
  XS_ASSERT(o.buffer_bytes > 0, "--buffer: '{}' is zero bytes", c.buffer);
  o.copy_engine = !c.no_copy_engine;
  o.fresh_addresses = !c.same_addresses;
  o.progress = !c.quiet;
  const std::filesystem::path out(c.out);
  XS_ASSERT(c.force || !std::filesystem::exists(out / "sweep.csv"), "{} already exists (use --force to overwrite)",
            (out / "sweep.csv").string());
  // Bad lists are refused before the GPU is looked for.
  if (c.sweep == "custom") custom_sweep(c, 1);
  const auto patterns = c.patterns.empty() ? std::vector<std::string>{} : pattern_list(c.patterns);
  if (c.sweep != "custom") (void)probe::standard_sweep(o.gpus, 132, c.sweep == "quick", patterns);
  const int visible = needs_gpu("probe");
  XS_ASSERT(o.gpus <= visible, "probe: --gpus {} asks for more GPUs than the {} visible", o.gpus, visible);
  cudaDeviceProp prop{};
  XS_ASSERT(cudaGetDeviceProperties(&prop, 0) == cudaSuccess, "probe: the properties of GPU 0 cannot be read");
  o.configs = c.sweep == "custom" ? custom_sweep(c, prop.multiProcessorCount)
                                  : probe::standard_sweep(o.gpus, prop.multiProcessorCount, c.sweep == "quick", patterns);
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
  cmd->add_option("--gpus", c->o.gpus, "GPUs (rank 0 sends, the others receive)")->check(v::min(1, "GPUs"))
      ->capture_default_str();
  cmd->add_option("--sweep", c->sweep, "standard (model fit), quick, or custom (the lists below)")
      ->check(CLI::IsMember({"standard", "quick", "custom"}))->capture_default_str();
  cmd->add_option("--pattern", c->patterns,
                  "local,peer,all_peers,host (comma list; host: mapped pinned host memory over the host link). "
                  "Default: peer with --sweep custom; local, peer, all_peers as the GPUs allow with standard/quick");
  cmd->add_option("--store", c->stores, "st4,st8,st16,tma (comma list)")->capture_default_str();
  cmd->add_option("--mode", c->modes, "issue,visible (comma list)")->capture_default_str();
  cmd->add_option("--sms", c->sms, "issuing SMs (comma list; 0 = all)")->capture_default_str();
  cmd->add_option("--burst", c->bursts, "bytes per SM per burst (comma list, e.g. 4KiB,16KiB)")->capture_default_str();
  cmd->add_option("--gap", c->gaps, "compute between bursts (comma list, e.g. 0,2us,10us)")->capture_default_str();
  cmd->add_option("--warmup", c->o.warmup, "unmeasured bursts first")->check(v::min(0, "bursts"))
      ->capture_default_str();
  cmd->add_option("--bursts", c->o.bursts, "measured bursts per SM")->check(v::min(1, "bursts"))
      ->capture_default_str();
  cmd->add_option("--buffer", c->buffer, "payload buffer per GPU")->capture_default_str();
  cmd->add_option("--out", c->out, "output folder (sweep.csv, probe_summary.json)")->check(v::output_folder())
      ->capture_default_str();
  cmd->add_flag("--same-addresses", c->same_addresses,
                "every burst of an SM rewrites one place (default: each burst to the next place of the "
                "SM's share of --buffer, never rewriting lines the last bursts may still hold, as the kernels)");
  cmd->add_flag("--no-copy-engine", c->no_copy_engine, "skip the cudaMemcpyPeer reference");
  cmd->add_flag("--quiet", c->quiet, "no progress bar");
  cmd->add_flag("--force", c->force, "overwrite an existing sweep.csv in --out");
  cmd->callback([c] { run(*c); });
}

}  // namespace xstage::cli
