// `xstage bench attention` (CUDA builds; xstage/attention/attention_bench.cpp): our
// sm_90a attention forward kernel against PyTorch SDPA (flash and cuDNN backends,
// through LibTorch when built with XSTAGE_TORCH_BASELINES=ON, or their times from a
// JSON file) over S x heads x D x causal. One table line per configuration; each
// row checks ours and every baseline (sampled query rows against the fp32 GPU naive
// reference) in the same loop; the JSON (docs/results/attention.json format) is
// rewritten after every row. Fails at the end when a row's output was wrong.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "xstage/attention/attention.hpp"

namespace xstage::attention {

struct BenchOptions {
  std::vector<int64_t> seqs{1024, 4096, 16384, 32768, 65536, 131072}, heads{24, 6, 40, 10}, dims{64, 128};
  std::vector<bool> causal{false, true};
  int warmup = 1, reps = 10;
  double budget_ms = 300;     // GPU time per implementation and row after 3 samples
  int check_rows = 64;        // query rows checked against the naive reference (at least 2)
  bool torch = true;          // the LibTorch baselines, when built in
  std::string baselines_json; // SDPA times (sdpa_flash_ms, sdpa_cudnn_ms per row) when LibTorch is not built in
  FwdOptions kernel;          // our kernel's pingpong, snake and head grouping
  std::string json = "docs/results/attention.json";  // empty: none
  std::string command;        // the command line, for the results file
};
void run_bench(const BenchOptions& o);

}  // namespace xstage::attention
