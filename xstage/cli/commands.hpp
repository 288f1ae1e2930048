// Sub-command registration for the `xstage` CLI. The commands only parse flags and
// call a library function; main() runs the chosen one and turns every common::Error
// (and CLI11's parse errors) into a one-line message and a non-zero exit.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "common/validate.hpp"

namespace xstage::cli {

#ifdef XSTAGE_HAVE_CUDA
inline constexpr bool kHaveCuda = true;
#else
inline constexpr bool kHaveCuda = false;
#endif

// The command line as typed (for results files' `command` field); set by main().
const std::string& command_line();
// The `bench` parent command, created on first use (bench attention, bench moe, ...).
CLI::App* bench_group(CLI::App& app);
// Before a command's run: its --json and --png (empty: not asked for) must be writable
// later (common::check_output_path), so that a bad path fails now, not after the run.
void check_outputs(const std::string& command, const std::string& json, const std::string& png = "");
// In a build without CUDA, for the commands that need a GPU: one line, then exit 1.
[[noreturn]] void needs_cuda(const std::string& command);
// Before a command that needs a GPU: the visible CUDA devices, counted first so that a
// machine without a GPU (or a driver) gets "<command>: needs a CUDA GPU" rather than the
// runtime's first failing call; `hint` (optional) follows, e.g. what runs without one.
// In a build without CUDA: needs_cuda(command).
int needs_gpu(const std::string& command, const std::string& hint = "");
// main(): the one line an exhausted operator new gives, naming the command.
void name_out_of_memory(int argc, char** argv);
// Comma lists whose repeats make no sense (--tokens 4K,4K): refused after parsing,
// naming the option and the items (common::validate::unique).
template <class T>
void unique_items(const std::vector<T>& xs, const char* option) {
  common::validate::unique<T>(std::span<const T>(xs), option);
}

// Options that several commands share, with one wording.
// --params is checked to be a readable file at parse time.
void add_params_option(CLI::App* cmd, std::string& params);
// --json (and --png when `png` is given), defaults shown.
void add_output_options(CLI::App* cmd, std::string& json, std::string* png = nullptr,
                        const std::string& png_help = "Plot (empty: none)");

// fit, predict, plot, demo, synth (host only; xstage/cli/model_commands.cpp)
void add_model_commands(CLI::App& app);
// probe, info (xstage/cli/probe_commands.cpp; in a build without CUDA, main.cpp's
// stand-ins explain that they need one).
void add_probe_commands(CLI::App& app);
// probe-results (host only; xstage/cli/results_commands.cpp)
void add_results_commands(CLI::App& app);
// bench attention (xstage/cli/attention_commands.cpp)
void add_attention_commands(CLI::App& app);
// bench moe (xstage/cli/moe_commands.cpp)
void add_moe_commands(CLI::App& app);
// bench ulysses, bench qkv (xstage/cli/ulysses_commands.cpp)
void add_ulysses_commands(CLI::App& app);
// dit (xstage/cli/dit_commands.cpp); the CPU reference (--cpu) runs without CUDA.
void add_dit_commands(CLI::App& app);

}  // namespace xstage::cli
