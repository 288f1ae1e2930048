#include <cstdio>

#include "commands.hpp"
#include "common/check.hpp"
#include "common/cli.hpp"
#include "common/files.hpp"
#include "common/plot.hpp"

namespace xstage::cli {
namespace {
std::string g_command_line;
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
  cmd->add_option("--params", params, "Burst-Gap parameters (default: xstage/data/h200_params.json)");
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
}  // namespace xstage::cli
#endif

int main(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    if (i) xstage::cli::append_command_line(" ");
    xstage::cli::append_command_line(i == 0 ? "xstage" : argv[i]);
  }
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
