// Sub-command registration for the `xstage` CLI. Each module adds its commands
// to the app; main() runs the chosen one and turns every common::Error (and
// CLI11's parse errors) into a one-line message and a non-zero exit.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace xstage::cli {

// The command line as typed (for results files' `command` field); set by main().
const std::string& command_line();
// Today's date in UTC, YYYY-MM-DD (the `date` of results files).
std::string today_utc();
// The `bench` parent command, created on first use (bench attention, bench moe).
CLI::App* bench_group(CLI::App& app);
// Before a command's run: its --json and --png (empty: not asked for) must be writable
// later (common::check_output_path), so that a bad path fails now, not after the run.
void check_outputs(const std::string& command, const std::string& json, const std::string& png = "");

// fit, predict, plot, demo (host only; xstage/cli/model_commands.cpp)
void add_model_commands(CLI::App& app);
// probe (CUDA; xstage/cli/probe_commands.cpp). Without a CUDA build the command
// exists and explains that it needs one.
void add_probe_commands(CLI::App& app);
// probe-results (host only; xstage/cli/results_commands.cpp)
void add_results_commands(CLI::App& app);
// bench attention (xstage/cli/attention_commands.cpp); explains itself without CUDA.
void add_attention_commands(CLI::App& app);
// bench moe (xstage/cli/moe_commands.cpp); explains itself without CUDA.
void add_moe_commands(CLI::App& app);
// bench ulysses (xstage/cli/ulysses_commands.cpp); explains itself without CUDA.
void add_ulysses_commands(CLI::App& app);
// dit (xstage/cli/dit_commands.cpp); the CPU reference (--cpu) runs without CUDA.
void add_dit_commands(CLI::App& app);

}  // namespace xstage::cli
