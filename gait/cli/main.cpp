#include <cstdio>
#include <exception>

#include "commands.hpp"
#include "common/check.hpp"
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
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "gait: %s\n", e.what());
    return 2;
  } catch (const common::Error& e) {
    std::fprintf(stderr, "gait: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gait: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
