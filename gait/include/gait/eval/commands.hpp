// The model sub-commands of the `gait` CLI (registered by gait::cli::add_model_commands,
// called from gait/cli/main.cpp):
//   gait train        --config CFG [--resume | --resume-from CKPT] [overrides]
//   gait eval         --ckpt CKPT [--data ROOT] [--heads H] [--skeleton-scale A | --fusion FILE]
//                     [--dump-embeddings PREFIX] | --embeddings PREFIX
//   gait embed        --ckpt CKPT --out PREFIX (SEQ... | --gallery-set) [--data ROOT]
//   gait identify     --ckpt CKPT --gallery PREFIX PROBE [--data ROOT] [--top K]
//   gait bench-infer  (--config CFG | --ckpt CKPT) [--frames 30] [--repeats 30]
//   gait tune-fusion  --ckpt CKPT --data DEV [--scales A...] [--out DIR]   (gait/eval/fusion.hpp)
#pragma once

#include <CLI/CLI.hpp>

namespace gait::cli {

void add_model_commands(CLI::App& app);      // all of them (model_commands.cpp)
void add_train_command(CLI::App& app);       // gait/train/train_command.cpp
void add_eval_commands(CLI::App& app);       // eval_commands.cpp: eval, embed, identify, bench-infer, tune-fusion

}  // namespace gait::cli
