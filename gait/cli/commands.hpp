// Sub-command registration for the `gait` CLI. Each file adds its commands to the
// app; main() runs the chosen one and turns every common::Error (and CLI11's parse
// errors) into a one-line message and a non-zero exit. Later issues add `train` and
// `eval` the same way.
#pragma once

#include <CLI/CLI.hpp>

namespace gait::cli {

void add_synth_command(CLI::App& app);       // synth_command.cpp
void add_dataset_commands(CLI::App& app);    // dataset_commands.cpp: index, preprocess
void add_mocap_commands(CLI::App& app);      // mocap_commands.cpp: mocap, mocap-pack
void add_strip_command(CLI::App& app);       // strip_command.cpp
void add_baseline_command(CLI::App& app);    // baseline_command.cpp

}  // namespace gait::cli
