#include <cstdio>
#include <new>
#include <string>

#include "commands.hpp"
#include "common/check.hpp"
#include "common/cli.hpp"
#include "common/files.hpp"
#include "common/plot.hpp"
#include "common/validate.hpp"
#ifdef XSTAGE_HAVE_CUDA
#include "common/cuda_check.hpp"
#endif

namespace xstage::cli {
namespace {
std::string g_command_line;
std::string g_out_of_memory = "out of memory";

// operator new's failure as one line naming the command: a size that grows with a
// user's number and that no option check bounds still ends in "dit: out of host
// memory ...", not a bare "std::bad_alloc". Thrown from the new-handler, so the stack
// unwinds and staged outputs are removed as on any other error.
class OutOfMemory : public std::bad_alloc {
 public:
  const char* what() const noexcept override { return g_out_of_memory.c_str(); }
};

[[noreturn]] void throw_out_of_memory() { throw OutOfMemory{}; }
}  // namespace

// Called first in main(): names the command in the out-of-memory line.
void name_out_of_memory(int argc, char** argv) {
  std::string command = argc > 1 ? argv[1] : "xstage";
  if (command == "bench" && argc > 2) command += std::string(" ") + argv[2];
  g_out_of_memory = command + ": out of host memory (an allocation failed; ask for smaller sizes, e.g. fewer tokens)";
  std::set_new_handler(throw_out_of_memory);
}
const std::string& command_line() { return g_command_line; }
void append_command_line(const char* part) { g_command_line += part; }

void check_outputs(const std::string& command, const std::string& json, const std::string& png) {
  if (!json.empty()) common::check_output_path(json, command + ": --json");
  if (png.empty()) return;
  common::plot::require_charts(command + ": --png " + png);
  common::check_output_path(png, command + ": --png");
}

void needs_cuda(const std::string& command) {
  XS_FAIL("this xstage was built without CUDA (nvcc and NCCL >= 2.28 were not found): {} is unavailable", command);
}

CLI::App* bench_group(CLI::App& app) {
  try {
    return app.get_subcommand("bench");
  } catch (const CLI::OptionNotFound&) {
    auto* b = app.add_subcommand("bench", "Benchmarks of the xstage kernels against their baselines");
    b->require_subcommand(1);
    return b;
  }
}

void add_params_option(CLI::App* cmd, std::string& params) {
  cmd->add_option("--params", params, "Burst-Gap parameters (default: xstage/data/h200_params.json)")
      ->check(common::validate::readable_file());
}

void add_output_options(CLI::App* cmd, std::string& json, std::string* png, const std::string& png_help) {
  cmd->add_option("--json", json, "Results file, rewritten after every row (empty: none)")->capture_default_str();
  if (png) cmd->add_option("--png", *png, png_help)->capture_default_str();
}
}  // namespace xstage::cli

#ifndef XSTAGE_HAVE_CUDA
namespace xstage::cli {
void add_probe_commands(CLI::App& app) {
  app.add_subcommand("info", "Build features and visible GPUs")->callback([] {
    std::printf("cuda: no\ncharts: %s\ngpus: 0\n", common::plot::charts_available() ? "yes" : "no");
  });
  auto* cmd = app.add_subcommand("probe", "Measure the X-Stage on this node's GPUs (needs a CUDA build)");
  cmd->allow_extras();
  cmd->callback([] { needs_cuda("probe"); });
}

int needs_gpu(const std::string& command, const std::string&) { needs_cuda(command); }
}  // namespace xstage::cli
#endif

int main(int argc, char** argv) {
#ifdef XSTAGE_HAVE_CUDA
  common::request_stream_queues();  // before any CUDA call
#endif
  for (int i = 0; i < argc; ++i) {
    if (i) xstage::cli::append_command_line(" ");
    xstage::cli::append_command_line(i == 0 ? "xstage" : argv[i]);
  }
  xstage::cli::name_out_of_memory(argc, argv);
  CLI::App app{"xstage: X-Stage probe, Burst-Gap model and fused overlap kernels for multi-GPU DiT inference"};
  app.require_subcommand(1);
  xstage::cli::add_model_commands(app);
  xstage::cli::add_probe_commands(app);
  xstage::cli::add_results_commands(app);
  xstage::cli::add_attention_commands(app);
  xstage::cli::add_moe_commands(app);
  xstage::cli::add_ulysses_commands(app);
  xstage::cli::add_dit_commands(app);
  return common::run_cli(app, argc, argv, "xstage");
}
