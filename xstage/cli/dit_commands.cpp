// `xstage dit`: the DiT denoiser's Euler sampler on P GPUs (Ulysses SP), serial and
// fused post-attention All-to-All; or the fp32 CPU reference (--cpu, tiny presets);
// or the plan of a GPU run (--plan, no GPU). The runs and their reports are the
// library's (xstage/bench/dit_bench.hpp); rows go to a docs/results/dit.json-format
// file that keeps the rows of other runs.
#include <cstdint>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "commands.hpp"
#include "common/check.hpp"
#include "common/files.hpp"
#include "common/validate.hpp"
#include "xstage/bench/dit_bench.hpp"
#include "xstage/ulysses/geometry.hpp"  // kMaxRanks

namespace xstage::cli {

namespace {

namespace v = common::validate;

// The longest latent sequence asked for: about 14x the largest preset's (wan-like, 75600
// tokens). The activations grow with it (and attention with its square), so a typo such
// as 2147483647 is refused here instead of ending in an allocation failure.
constexpr int64_t kMaxTokens = int64_t{1} << 20;

struct DitCli {
  std::string preset = "tiny";
  int moe_raster = xstage::moe::kMoeRasterGroup;
  std::string moe_routing = "device";
  std::string gemm_epilogues = "fused";
  bool cpu = false, plan = false;
  std::optional<int> blocks;           // empty: all of the preset
  std::optional<int64_t> pad_multiple; // empty: only the padding P > 1 needs
  dit::CommandOptions o = [] {
    dit::CommandOptions c;
    c.run.steps = 4;
    return c;
  }();
};

void run(DitCli& d) {
  dit::CommandOptions& o = d.o;
  o.run.blocks = d.blocks.value_or(0);
  o.run.pad_multiple = d.pad_multiple.value_or(0);
  o.config = dit::preset(d.preset);
  o.config.moe_raster_group = d.moe_raster;
  o.config.moe_device_routing = d.moe_routing == "device";
  o.config.gemm_epilogues = d.gemm_epilogues == "fused";
  o.command = command_line();
  XS_ASSERT(!(d.cpu && o.breakdown), "dit: --breakdown times the GPU path's phases; it does not go with --cpu");
  XS_ASSERT(o.png.empty() || o.breakdown, "dit: --png draws --breakdown's phases; give --breakdown too");
  check_outputs("dit", o.json, o.png);  // before the run: a bad path loses no figure
  XS_ASSERT(o.plan_json.empty() || d.plan, "dit: --plan-json writes --plan's plan; give --plan too");
  if (d.plan) {
    XS_ASSERT(!d.cpu && !o.breakdown && o.json.empty() && o.png.empty(),
              "dit: --plan runs nothing; it does not go with --cpu, --breakdown, --json or --png");
    return dit::report_plan(o);
  }
  if (d.cpu) return dit::run_cpu(o);
  if constexpr (kHaveCuda) {
    needs_gpu("dit", "the CPU reference runs with --preset tiny --cpu");
    dit::run_gpus(o);
  } else {
    XS_FAIL("dit: this xstage was built without CUDA; the CPU reference runs with --preset tiny --cpu");
  }
}

}  // namespace

void add_dit_commands(CLI::App& app) {
  auto* cmd = app.add_subcommand("dit", "DiT denoiser over Ulysses SP GPUs: per-step latency of the serial and "
                                        "fused post-attention All-to-All, speedup, difference to one GPU");
  auto d = std::make_shared<DitCli>();
  dit::CommandOptions& o = d->o;
  cmd->add_option("--preset", d->preset, "tiny, tiny-video, tiny-moe, flux-like, wan-like, dit-moe")
      ->check(CLI::IsMember(dit::preset_names()))->capture_default_str();
  cmd->add_option("--tokens", o.run.tokens,
                  "Latent tokens N (a multiple of the preset's frames; with --gpus P > 1 the ranks pad it to a "
                  "multiple of 128 P)")->check(v::range(1, static_cast<double>(kMaxTokens), "tokens"))->capture_default_str();
  cmd->add_option("--steps", o.run.steps, "Euler steps of the sampler")->check(v::min(1, "steps"))
      ->capture_default_str();
  cmd->add_option("--gpus", o.run.ranks, "Ranks P (one per GPU); P > 1 also runs P = 1 for the difference")
      ->check(v::range(1, xstage::ulysses::kMaxRanks, "GPUs"))->capture_default_str();
  cmd->add_option("--blocks", d->blocks, "Blocks used (default: all of the preset)")->check(v::min(1, "blocks"));
  cmd->add_option("--pad-multiple", d->pad_multiple,
                  "Also pad the tokens to a multiple of this, P = 1 included (default: only the padding P > 1 "
                  "needs); the padding is masked as keys and dropped from the output")
      ->check(v::min(1, "tokens"));
  cmd->add_flag("--serial", o.serial_only, "Serial post-attention All-to-All only (no fused run, no speedup)");
  cmd->add_flag("--cpu", d->cpu, "The fp32 CPU reference instead (tiny presets, one rank)");
  cmd->add_option("--seed", o.seed, "Weights seed (the latent uses seed + 1)")->capture_default_str();
  cmd->add_option("--weights", o.weights, "Load weights from a safetensors file instead of random ones")
      ->check(v::readable_file());
  cmd->add_option("--save-weights", o.save_weights, "Write the weights used to a safetensors file")
      ->check(v::output_file());
  cmd->add_option("--save-dtype", o.save_dtype, "f32 or bf16")->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  add_params_option(cmd, o.params);
  cmd->add_option("--warmup", o.warmup, "Warm-up steps before timing")->check(v::min(0, "steps"))
      ->capture_default_str();
  cmd->add_option("--samples", o.samples, "Timed steps (median)")->check(v::min(1, "steps"))->capture_default_str();
  cmd->add_option("--json", o.json, "Append rows to this results file (docs/results/dit.json format)");
  cmd->add_option("--moe-raster", d->moe_raster,
                  "MoE presets: m blocks per raster group of the fused MoE kernel's tiles (1: m-major)")
      ->check(v::min(1, "m blocks"))->capture_default_str();
  cmd->add_option("--moe-routing", d->moe_routing,
                  "MoE presets: routing, layout and tile order on the GPU (device) or on the host, one round trip "
                  "per block (host)")
      ->check(CLI::IsMember({"device", "host"}))->capture_default_str();
  cmd->add_option("--gemm-epilogues", d->gemm_epilogues,
                  "The GEMM tails: the attention projection's bias, and for GELU MLP presets fc1's bias + GELU and "
                  "fc2's bias, in cuBLASLt epilogues with bf16 outputs (fused), or cuBLAS GEMMs with fp32 outputs "
                  "and kernels of their own (separate); and at P = 1 with head dim 128 the QKV projection as the "
                  "fused QKV kernel (GEMM, bias, norms, RoPE) or as cuBLAS + qk_norm_rope")
      ->check(CLI::IsMember({"fused", "separate"}))->capture_default_str();
  cmd->add_flag("--plan", d->plan,
                "Print what the GPU path would do on --gpus P ranks and exit, no GPU needed: each rank's tokens and "
                "heads, the fused kernels' tile orders and the stalls the Burst-Gap model predicts for them, the MoE "
                "schedules, bytes and FLOPs per block");
  cmd->add_option("--plan-json", o.plan_json, "With --plan: the plan as JSON too")->check(v::output_file());
  cmd->add_option("--sms", o.sms, "With --plan: the GPU's SM count (H200: 132)")->check(v::range(1, 1024, "SMs"))
      ->capture_default_str();
  cmd->add_flag("--breakdown", o.breakdown,
                "After the timed steps, as many more with a CUDA event after each phase: ms per phase and path "
                "(table, and phases_ms_per_step in the JSON row)");
  cmd->add_option("--png", o.png, "With --breakdown: a chart of each path's phases (ms per step) to this PNG");
  cmd->add_flag("--quiet", o.quiet, "No progress bar");
  cmd->callback([d] { run(*d); });
}

}  // namespace xstage::cli
