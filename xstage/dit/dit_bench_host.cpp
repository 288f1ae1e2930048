// `xstage dit` without a GPU (xstage/bench/dit_bench.hpp): the fp32 CPU reference
// (--cpu) and the plan of a GPU run (--plan).
#include <fmt/format.h>

#include <chrono>
#include <cmath>

#include "common/check.hpp"
#include "common/files.hpp"
#include "xstage/bench/dit_bench.hpp"
#include "xstage/dit/safetensors.hpp"

namespace xstage::dit {

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, double(std::fabs(x)));
  return m;
}

namespace {

// One rank's row of the plan table.
void print_rank(const RankPlan& r, int P) {
  auto range = [](int64_t first, int64_t n) {
    return n == 1 ? std::to_string(first) : fmt::format("{}-{}", first, first + n - 1);
  };
  const std::string qkv = r.qkv_fused ? (P > 1 ? "fused + A2A" : "fused") : "cuBLAS";
  fmt::print("{:>4} {:>15} {:>7} {:>7} {:>7} | {:>13} {:>8} {:>11} | {:>13} {:>8} {:>11}\n", r.rank,
             range(r.row0, r.real + r.padding), r.real, r.padding, range(r.head0, r.heads), qkv,
             r.qkv_fused ? std::to_string(r.qkv_grid) : "-",
             r.qkv_fused ? fmt::format("{:.2f}", r.qkv_stall_ns / 1e3) : "-", P > 1 ? "fused + A2A" : "one GPU",
             P > 1 ? std::to_string(r.attention_grid) : "-",
             P > 1 ? fmt::format("{:.2f}", r.attention_stall_ns / 1e3) : "-");
}

void print_plan(const Config& c, const RunPlan& plan, const burstgap::ModelParams& peer) {
  const int P = plan.ranks;
  const std::string ffn = c.ffn == Ffn::moe
                              ? fmt::format("MoE {} experts top-{}, intermediate {}", c.experts, c.topk, c.moe_inter)
                              : fmt::format("GELU MLP {}", c.ffn_hidden);
  const std::string padding = plan.padded > plan.tokens ? fmt::format("padded to {}", plan.padded) : "no padding";
  fmt::print("plan: {}, {} tokens on P = {} ({}, {} per rank), {} blocks, hidden {}, {} heads x {}, {}; {} SMs; "
             "Burst-Gap {}/{} fitted on {} GPUs (drain {:.0f} GB/s)\n",
             c.name, plan.tokens, P, padding, plan.per_rank, plan.blocks, c.hidden, c.heads, c.head_dim, ffn, plan.sms,
             peer.pattern, peer.store, peer.gpus, peer.drain_GBps);
  fmt::print("{:>4} {:>15} {:>7} {:>7} {:>7} | {:>13} {:>8} {:>11} | {:>13} {:>8} {:>11}\n", "rank", "tokens", "real",
             "padding", "heads", "QKV kernel", "CTAs", "stall us", "attention", "CTAs", "stall us");
  for (const RankPlan& r : plan.rank) print_rank(r, P);
  const double D = peer.drain_GBps;  // bytes per ns
  auto mb = [](double b) { return b / 1e6; };
  fmt::print("per block and rank: GEMMs {:.1f} GFLOP, attention {:.1f} GFLOP", plan.gemm_flops / 1e9,
             plan.attention_flops / 1e9);
  if (P > 1)
    fmt::print("; sends {:.2f} MB before attention and {:.2f} MB after ({:.1f} and {:.1f} us at the fitted drain rate)",
               mb(plan.pre_a2a_bytes), mb(plan.post_a2a_bytes), plan.pre_a2a_bytes / D / 1e3,
               plan.post_a2a_bytes / D / 1e3);
  if (plan.moe && P > 1)
    fmt::print("; MoE dispatch and combine {:.2f} MB each (uniform routing)", mb(plan.moe_dispatch_bytes));
  fmt::print("\n");
  if (!plan.rank.empty() && plan.rank[0].qkv_fused) fmt::print("QKV order, rank 0: {}\n", plan.rank[0].qkv_order);
  if (P > 1) fmt::print("attention order, rank 0: {}\n", plan.rank[0].attention_order);
  if (plan.moe) {
    fmt::print("MoE Interleaved (predicted stall {:.2f} us): {}\n", plan.moe_interleaved_stall_ns / 1e3,
               plan.moe_interleaved);
    fmt::print("MoE Expert-Wave (predicted stall {:.2f} us): {}\n", plan.moe_expert_wave_stall_ns / 1e3,
               plan.moe_expert_wave);
  }
  if (P == 1) fmt::print("P = 1: no All-to-All, every store is local (predicted stalls are 0)\n");
  else
    fmt::print("the table is the fused path's; the serial path (--serial) moves the same bytes with NCCL around cuBLAS's "
               "QKV projection and the plain attention kernel\n");
}

nlohmann::json plan_json(const Config& c, const RunPlan& plan, const burstgap::ModelParams& peer,
                         const std::string& command) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankPlan& r : plan.rank)
    ranks.push_back({{"rank", r.rank}, {"row0", r.row0}, {"real", r.real}, {"padding", r.padding},
                     {"head0", r.head0}, {"heads", r.heads}, {"qkv_fused", r.qkv_fused}, {"qkv_grid", r.qkv_grid},
                     {"qkv_predicted_stall_us", r.qkv_stall_ns / 1e3}, {"qkv_order", r.qkv_order},
                     {"attention_grid", r.attention_grid},
                     {"attention_predicted_stall_us", r.attention_stall_ns / 1e3},
                     {"attention_order", r.attention_order}});
  nlohmann::json j = {{"date", bench::today_utc()}, {"command", command}, {"preset", c.name},
                      {"tokens", plan.tokens}, {"padded_tokens", plan.padded}, {"P", plan.ranks},
                      {"blocks", plan.blocks}, {"sms", plan.sms},
                      {"burstgap", {{"pattern", peer.pattern}, {"store", peer.store}, {"gpus", peer.gpus},
                                    {"drain_GBps", peer.drain_GBps}}},
                      {"ranks", ranks},
                      {"per_block_per_rank",
                       {{"pre_a2a_bytes", plan.pre_a2a_bytes}, {"post_a2a_bytes", plan.post_a2a_bytes},
                        {"moe_dispatch_bytes", plan.moe_dispatch_bytes}, {"moe_combine_bytes", plan.moe_combine_bytes},
                        {"gemm_flops", plan.gemm_flops}, {"attention_flops", plan.attention_flops}}}};
  if (plan.moe)
    j["moe"] = {{"interleaved", plan.moe_interleaved},
                {"interleaved_predicted_stall_us", plan.moe_interleaved_stall_ns / 1e3},
                {"expert_wave", plan.moe_expert_wave},
                {"expert_wave_predicted_stall_us", plan.moe_expert_wave_stall_ns / 1e3}};
  return j;
}

}  // namespace

std::string results_key(const nlohmann::json& r) {
  const int64_t tokens = r.value("tokens", int64_t{0});
  return fmt::format("{}/{}/{}/{}/{}/{}/{}/{}", r.value("preset", ""), tokens, r.value("padded_tokens", tokens),
                     r.value("P", 0), r.value("blocks", 0), r.value("steps", 0), r.value("moe_routing", ""),
                     r.value("gemm_epilogues", "separate"));
}

Weights host_weights(const CommandOptions& o, int blocks) {
  const Config& c = o.config;
  Weights w = o.weights.empty() ? random_weights(c, blocks, o.seed) : load_weights(o.weights, c, blocks);
  if (!o.save_weights.empty()) {
    XS_ASSERT(o.save_dtype == "f32" || o.save_dtype == "bf16", "dit: --save-dtype {} (f32 or bf16)", o.save_dtype);
    save_weights(o.save_weights, c, blocks, w, o.save_dtype == "f32" ? StDType::f32 : StDType::bf16);
    std::printf("wrote %s\n", o.save_weights.c_str());
  }
  return w;
}

void run_cpu(const CommandOptions& o) {
  const Config& c = o.config;
  const Run& run = o.run;
  XS_ASSERT(c.name.rfind("tiny", 0) == 0, "dit: --cpu runs the naive fp32 reference, meant for the tiny presets "
            "(got {}; use a GPU for it)", c.name);
  XS_ASSERT(run.ranks == 1, "dit: --cpu runs one rank (got --gpus {})", run.ranks);
  XS_ASSERT(run.pad_multiple == 0, "dit: --cpu runs the unpadded reference (got --pad-multiple {})", run.pad_multiple);
  validate(c, run, false);
  bench::ResultsFile file(o.json, bench::run_head("cpu", 0, o.command));
  file.keep_other_rows(results_key);  // an unreadable file fails now, before the run
  const int blocks = blocks_used(c, run);
  const Weights w = host_weights(o, blocks);
  const Grid g = token_grid(c, run.tokens);
  const auto x0 = random_latent(c, run.tokens, o.seed + 1);
  const auto t0 = std::chrono::steady_clock::now();
  const auto x = reference_sample(c, blocks, w, g, x0, run.steps, !o.quiet);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("dit cpu: %s tokens %ld (%ldx%ldx%ld) blocks %d steps %d: %.1f ms per step; max |x| %.4f -> %.4f\n",
              c.name.c_str(), long(run.tokens), long(g.t), long(g.h), long(g.w), blocks, run.steps, ms / run.steps,
              max_abs(x0), max_abs(x));
  if (o.json.empty()) return;
  file.add({{"preset", c.name}, {"tokens", run.tokens}, {"P", 1}, {"blocks", blocks}, {"steps", run.steps},
            {"path", "cpu"}, {"cpu_step_ms", ms / run.steps}, {"latent_max_abs", max_abs(x)}});
  file.write();
  std::printf("wrote %s (%zu rows)\n", o.json.c_str(), file.rows_written());
}

void report_plan(const CommandOptions& o) {
  const auto params = burstgap::read_params_or_default(o.params);
  const burstgap::ModelParams& peer = params.for_exchange(o.run.ranks);
  const RunPlan plan = plan_run(o.config, o.run, peer, o.sms);
  print_plan(o.config, plan, peer);
  if (o.plan_json.empty()) return;
  common::write_file_atomic(o.plan_json, plan_json(o.config, plan, peer, o.command).dump(2) + "\n");
  fmt::print("wrote {}\n", o.plan_json);
}

}  // namespace xstage::dit
