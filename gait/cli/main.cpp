#include "commands.hpp"
#include "common/check.hpp"
#include "common/cli.hpp"
#include "gait/eval/commands.hpp"  // train, eval, embed, identify, bench-infer

int main(int argc, char** argv) {
  CLI::App app{"gait: CASIA-B data layer and synthetic CASIA-B-like generator"};
  app.require_subcommand(1);
  gait::cli::add_synth_command(app);
  gait::cli::add_dataset_commands(app);
  gait::cli::add_mocap_commands(app);
  gait::cli::add_strip_command(app);
  gait::cli::add_baseline_command(app);
  gait::cli::add_model_commands(app);
  return common::run_cli(app, argc, argv, "gait");
}
