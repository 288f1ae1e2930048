// `xstage dit`: the DiT denoiser's runs and their reports. run_gpus (CUDA builds,
// xstage/dit/dit_bench.cpp): the Euler sampler on P GPUs (Ulysses SP), serial and fused
// post-attention All-to-All, per-step latency, speedup and the difference to the
// single-GPU result. run_cpu (xstage/dit/dit_bench_host.cpp): the fp32 CPU reference of
// the tiny presets. report_plan: what the GPU path would do, without a GPU.
//
// Rows go to a results file in the docs/results/dit.json format that collects rows of
// many runs: an existing file keeps its other rows, and a row with the same key
// (results_key: preset, tokens, padded tokens, P, blocks, steps, MoE routing, GEMM
// epilogues) is replaced.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "xstage/bench/report.hpp"
#include "xstage/dit/dit.hpp"

namespace xstage::dit {

struct CommandOptions {
  Config config;
  Run run;
  uint64_t seed = 1;                        // weights; the latent uses seed + 1
  std::string weights, save_weights;        // safetensors in (empty: random) and out (empty: none)
  std::string save_dtype = "f32";           // f32 | bf16
  std::string params;                       // Burst-Gap parameters (default: xstage/data/h200_params.json)
  int warmup = 2, samples = 5;              // timed steps: median of `samples` after `warmup`
  bool serial_only = false;                 // P > 1: no fused run
  bool breakdown = false;                   // as many more steps with a CUDA event after each phase
  bool quiet = false;                       // no progress bar
  std::string json, png;                    // rows (empty: none); --breakdown's chart (empty: none)
  std::string plan_json;                    // report_plan: the plan as JSON too (empty: none)
  int sms = 132;                            // report_plan: the GPU's SM count
  std::string command;                      // the command line, for the results file
};

std::string results_key(const nlohmann::json& row);
double max_abs(const std::vector<float>& v);
// The weights the runs use: loaded or random, written when save_weights is set.
Weights host_weights(const CommandOptions& o, int blocks);

void run_cpu(const CommandOptions& o);
void run_gpus(const CommandOptions& o);
void report_plan(const CommandOptions& o);

}  // namespace xstage::dit
