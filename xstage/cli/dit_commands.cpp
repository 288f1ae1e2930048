// `xstage dit`: the DiT denoiser's Euler sampler on P GPUs (Ulysses SP), serial
// and fused post-attention All-to-All, per-step latency, speedup and the
// difference to the single-GPU result; or the fp32 CPU reference (--cpu, tiny
// presets). JSON rows in the docs/results/dit.json format (appended to an
// existing file; a row with the same preset, tokens, padded tokens, P, blocks,
// steps and MoE routing is replaced).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "common/check.hpp"
#include "common/files.hpp"
#include "common/progress.hpp"
#include "xstage/burstgap.hpp"
#include "xstage/dit.hpp"
#include "xstage/dit_safetensors.hpp"

#ifdef XSTAGE_HAVE_CUDA
#include <cuda_runtime.h>

#include "xstage/check_cuda.hpp"
#include "xstage/comm.hpp"
#include "xstage/dit_cuda.hpp"
#endif

namespace xstage::cli {

namespace {

struct DitCli {
  std::string preset = "tiny";
  int64_t tokens = 256;
  int steps = 4;
  int gpus = 1;
  int blocks = 0;
  int64_t pad_multiple = 0;
  bool serial_only = false;
  bool cpu = false;
  uint64_t seed = 1;
  std::string weights, save_weights, save_dtype = "f32";
  std::string json;
  std::string params;
  int warmup = 2, samples = 5;
  int moe_raster = xstage::moe::kMoeRasterGroup;
  std::string moe_routing = "device";
  std::string gemm_epilogues = "fused";
  bool breakdown = false;
  std::string png;  // --breakdown's chart
  bool quiet = false;
  bool plan = false;      // --plan: print the run's plan, run nothing
  std::string plan_json;  // --plan-json: the plan as JSON too
  int sms = 132;          // --plan: the GPU's SM count
};

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, double(std::fabs(x)));
  return m;
}
double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  XS_ASSERT(a.size() == b.size(), "dit: comparing {} with {} values", a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, double(std::fabs(a[i] - b[i])));
  return m;
}
nlohmann::json num_or_null(double v, bool ok) { return ok ? nlohmann::json(v) : nlohmann::json(nullptr); }

// Appends rows to `path` (created when missing); same-key rows are replaced.
void write_rows(const std::string& path, const nlohmann::json& head, const nlohmann::json& rows) {
  namespace fs = std::filesystem;
  nlohmann::json out = head;
  out["rows"] = nlohmann::json::array();
  if (fs::exists(path)) {
    nlohmann::json old;
    try {
      old = nlohmann::json::parse(common::read_file(path));
    } catch (const nlohmann::json::exception& e) {
      XS_FAIL("dit: {} exists but is not JSON ({}); remove it or pick another --json", path, e.what());
    }
    XS_ASSERT(old.is_object() && old.contains("rows") && old["rows"].is_array(),
              "dit: {} exists but has no \"rows\" array; remove it or pick another --json", path);
    auto key = [](const nlohmann::json& r) {
      const int64_t tokens = r.value("tokens", int64_t{0});
      return fmt::format("{}/{}/{}/{}/{}/{}/{}/{}", r.value("preset", ""), tokens, r.value("padded_tokens", tokens),
                         r.value("P", 0), r.value("blocks", 0), r.value("steps", 0), r.value("moe_routing", ""),
                         r.value("gemm_epilogues", "separate"));
    };
    for (const auto& r : old["rows"]) {
      bool replaced = false;
      for (const auto& n : rows) replaced = replaced || key(r) == key(n);
      if (!replaced) out["rows"].push_back(r);
    }
  }
  for (const auto& r : rows) out["rows"].push_back(r);
  common::write_file_atomic(path, out.dump(2) + "\n");
  std::printf("wrote %s (%zu rows)\n", path.c_str(), out["rows"].size());
}

dit::Weights host_weights(const DitCli& o, const dit::Config& c, int blocks) {
  dit::Weights w = o.weights.empty() ? dit::random_weights(c, blocks, o.seed) : dit::load_weights(o.weights, c, blocks);
  if (!o.save_weights.empty()) {
    XS_ASSERT(o.save_dtype == "f32" || o.save_dtype == "bf16", "dit: --save-dtype {} (f32 or bf16)", o.save_dtype);
    dit::save_weights(o.save_weights, c, blocks, w, o.save_dtype == "f32" ? dit::StDType::f32 : dit::StDType::bf16);
    std::printf("wrote %s\n", o.save_weights.c_str());
  }
  return w;
}

void run_cpu(const DitCli& o, const dit::Config& c, const dit::Run& run) {
  XS_ASSERT(c.name.rfind("tiny", 0) == 0, "dit: --cpu runs the naive fp32 reference, meant for the tiny presets "
            "(got {}; use a GPU for it)", c.name);
  XS_ASSERT(run.ranks == 1, "dit: --cpu runs one rank (got --gpus {})", run.ranks);
  XS_ASSERT(run.pad_multiple == 0, "dit: --cpu runs the unpadded reference (got --pad-multiple {})", run.pad_multiple);
  dit::validate(c, run, false);
  const int blocks = dit::blocks_used(c, run);
  const dit::Weights w = host_weights(o, c, blocks);
  const dit::Grid g = dit::token_grid(c, run.tokens);
  const auto x0 = dit::random_latent(c, run.tokens, o.seed + 1);
  const auto t0 = std::chrono::steady_clock::now();
  const auto x = dit::reference_sample(c, blocks, w, g, x0, run.steps, !o.quiet);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("dit cpu: %s tokens %ld (%ldx%ldx%ld) blocks %d steps %d: %.1f ms per step; max |x| %.4f -> %.4f\n",
              c.name.c_str(), long(run.tokens), long(g.t), long(g.h), long(g.w), blocks, run.steps, ms / run.steps,
              max_abs(x0), max_abs(x));
  if (!o.json.empty()) {
    nlohmann::json row = {{"preset", c.name}, {"tokens", run.tokens}, {"P", 1},          {"blocks", blocks},
                          {"steps", run.steps}, {"path", "cpu"},      {"cpu_step_ms", ms / run.steps},
                          {"latent_max_abs", max_abs(x)}};
    write_rows(o.json, {{"card", "cpu"}, {"gpus", 0}, {"date", today_utc()}, {"command", command_line()}},
               nlohmann::json::array({row}));
  }
}

#ifdef XSTAGE_HAVE_CUDA
void run_gpus(const DitCli& o, const dit::Config& c, const dit::Run& run) {
  dit::validate(c, run, true);  // shapes first: they are wrong on any machine
  const int gpus = comm::visible_gpus();
  XS_ASSERT(gpus > 0, "dit: no CUDA GPU is visible; the CPU reference runs with --preset tiny --cpu");
  dit::validate(c, run, true, gpus);
  const int blocks = dit::blocks_used(c, run);
  dit::Weights w;
  dit::GpuOptions opt;
  opt.weight_seed = o.seed;
  opt.latent_seed = o.seed + 1;
  opt.params = o.params;
  opt.warmup = o.warmup;
  opt.samples = o.samples;
  opt.breakdown_steps = o.breakdown ? o.samples : 0;
  opt.progress = !o.quiet;
  if (!o.weights.empty() || !o.save_weights.empty()) {
    w = host_weights(o, c, blocks);
    opt.weights = &w;
  }
  cudaDeviceProp prop{};
  XS_CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  const dit::Grid g = dit::token_grid(c, run.tokens);
  std::printf("dit: %s, %ld tokens (%ldx%ldx%ld), %d of %d blocks, %d steps, P = %d on %s\n", c.name.c_str(),
              long(run.tokens), long(g.t), long(g.h), long(g.w), blocks, c.blocks, run.steps, run.ranks, prop.name);
  const int64_t padded = dit::padded_tokens(c, run);
  if (padded > run.tokens)
    std::printf("dit: the ranks pad the sequence to %ld tokens (%ld per rank at P = %d%s); the %ld padding tokens are "
                "masked as keys and dropped from the output\n",
                long(padded), long(padded / run.ranks), run.ranks,
                run.pad_multiple > 0   ? ", --pad-multiple"
                : run.ranks > 1        ? ": whole 128-row attention tiles"
                                       : ": whole 128-row tiles of the fused QKV projection",
                long(padded - run.tokens));

  dit::Run one = run;
  one.ranks = 1;
  const dit::GpuResult single = dit::run_gpu(c, one, dit::AttnPath::single, opt);
  auto row = [&](int P) {
    dit::Run at = run;
    at.ranks = P;
    nlohmann::json j{{"preset", c.name}, {"tokens", run.tokens}, {"padded_tokens", dit::padded_tokens(c, at)},
                     {"P", P}, {"blocks", blocks}, {"steps", run.steps}, {"single_step_ms", single.step_ms}};
    if (c.ffn == dit::Ffn::moe) j["moe_routing"] = c.moe_device_routing ? "device" : "host";
    j["gemm_epilogues"] = single.gemm_epilogues;
    j["single_qkv_projection"] = single.qkv_projection;
    return j;
  };
  const bool moe = c.ffn == dit::Ffn::moe;
  const bool round_trip = moe && !c.moe_device_routing;
  std::vector<std::pair<std::string, dit::MoeTimes>> moe_lines;  // per path, printed after the table
  // MoE presets: the path's GPU times per block (and the host round trip with host routing).
  auto add_moe = [&](nlohmann::json& r, const std::string& path, const dit::MoeTimes& t) {
    if (!moe) return;
    r["moe_gpu_us_per_block"][path] = {{"plan", t.plan_gpu_us}, {"kernel", t.kernel_gpu_us}};
    if (round_trip)
      r["moe_host_us_per_block"][path] = {{"wait", t.wait_us}, {"route", t.route_us}, {"upload_launch", t.upload_us}};
    moe_lines.push_back({path, t});
  };
  // --breakdown: each path's phases per step (printed after the table).
  std::vector<std::pair<std::string, dit::PhaseTimes>> phase_cols;
  auto add_phases = [&](nlohmann::json& r, const std::string& path, const dit::GpuResult& g) {
    if (!o.breakdown) return;
    nlohmann::json ph = nlohmann::json::object();
    for (int i = 0; i < dit::kPhases; ++i) ph[dit::to_string(dit::Phase(i))] = g.phases.per_step(dit::Phase(i));
    r["phases_ms_per_step"][path] = ph;
    phase_cols.push_back({path, g.phases});
  };
  nlohmann::json rows = nlohmann::json::array();
  nlohmann::json r1 = row(1);
  add_moe(r1, "single", single.moe_host);
  add_phases(r1, "single", single);
  r1.update({{"serial_step_ms", nullptr}, {"fused_step_ms", nullptr}, {"speedup", nullptr},
             {"max_abs_diff_vs_single_gpu", 0.0}, {"latent_max_abs", max_abs(single.latent)}});
  rows.push_back(r1);
  std::printf("%-10s %6s %2s %6s | %9s %9s %9s | %7s | %10s %10s\n", "preset", "tokens", "P", "blocks", "single ms",
              "serial ms", "fused ms", "speedup", "diff ser", "diff fus");
  std::printf("%-10s %6ld %2d %6d | %9.3f %9s %9s | %7s | %10s %10s\n", c.name.c_str(), long(run.tokens), 1, blocks,
              single.step_ms, "-", "-", "-", "-", "-");
  if (run.ranks > 1) {
    const dit::GpuResult serial = dit::run_gpu(c, run, dit::AttnPath::serial, opt);
    dit::GpuResult fused;
    if (!o.serial_only) fused = dit::run_gpu(c, run, dit::AttnPath::fused, opt);
    const double ds = max_abs_diff(serial.latent, single.latent);
    const double df = o.serial_only ? NAN : max_abs_diff(fused.latent, single.latent);
    const double speedup = o.serial_only ? NAN : serial.step_ms / fused.step_ms;
    nlohmann::json r = row(run.ranks);
    r.update({{"serial_step_ms", serial.step_ms},
              {"fused_step_ms", num_or_null(fused.step_ms, !o.serial_only)},
              {"speedup", num_or_null(speedup, !o.serial_only)},
              {"max_abs_diff_vs_single_gpu", o.serial_only ? ds : df},
              {"max_abs_diff_serial_vs_single_gpu", ds},
              {"latent_max_abs", max_abs(single.latent)}});
    add_moe(r, "serial", serial.moe_host);
    if (!o.serial_only) add_moe(r, "fused", fused.moe_host);
    add_phases(r, "serial", serial);
    if (!o.serial_only) add_phases(r, "fused", fused);
    rows.push_back(r);
    std::printf("%-10s %6ld %2d %6d | %9.3f %9.3f %9.3f | %7.3f | %10.3e %10.3e\n", c.name.c_str(), long(run.tokens),
                run.ranks, blocks, single.step_ms, serial.step_ms, fused.step_ms, speedup, ds, df);
  }
  std::printf("per-step latency: median of %d steps after %d warm-up, slowest rank; diff: max |x_P - x_1| of the "
              "final latent (max |x_1| %.3f); GEMM tails: %s; P = 1 QKV projection: %s\n",
              o.samples, o.warmup, max_abs(single.latent), single.gemm_epilogues.c_str(),
              single.qkv_projection.c_str());
  if (!phase_cols.empty()) {
    std::printf("where a step's time goes (ms per step; %d more steps with a CUDA event after each phase, the slowest "
                "rank; qkv and attention hold the fused path's All-to-Alls):\n%-13s",
                o.samples, "phase");
    for (const auto& [path, t] : phase_cols) std::printf(" %9s %6s", path.c_str(), "share");
    std::printf("\n");
    for (int i = 0; i < dit::kPhases; ++i) {
      std::printf("%-13s", dit::to_string(dit::Phase(i)));
      for (const auto& [path, t] : phase_cols) {
        const double v = t.per_step(dit::Phase(i)), tot = t.total_per_step();
        std::printf(" %9.3f %5.1f%%", v, tot > 0 ? 100 * v / tot : 0.0);
      }
      std::printf("\n");
    }
    std::printf("%-13s", "sum");
    for (const auto& [path, t] : phase_cols) std::printf(" %9.3f %6s", t.total_per_step(), "");
    std::printf("\n");
  }
  if (moe && c.moe_device_routing)
    std::printf("MoE FFN: routing, layout and tile order on the GPU (no host round trip; --moe-routing host for "
                "the round trip)\n");
  for (const auto& [path, t] : moe_lines) {
    std::printf("MoE FFN on the GPU per block (%s, timed steps, slowest rank): planner %.1f us, kernel %.1f us\n",
                path.c_str(), t.plan_gpu_us, t.kernel_gpu_us);
    if (round_trip)
      std::printf("MoE FFN host round trip per block (%s, timed steps, slowest rank): wait for the router logits "
                  "%.1f us, routing + layout + order %.1f us, upload + launch %.1f us (the GPU idles for the last "
                  "two)\n",
                  path.c_str(), t.wait_us, t.route_us, t.upload_us);
  }
  if (!o.json.empty()) {
    write_rows(o.json,
               {{"card", prop.name}, {"gpus", gpus}, {"date", today_utc()}, {"command", command_line()},
                {"timed", "one Euler step (conditioning, all blocks, final layer, update) per rank, CUDA events; "
                          "median of the slowest rank; serial/fused: the Ulysses layer's post-attention All-to-All"}},
               rows);
  }
  if (!o.png.empty() && !phase_cols.empty()) {  // after the rows: a chart that fails loses no figure
    dit::write_breakdown_png(phase_cols,
                             fmt::format("xstage dit: {}, {} tokens, {} blocks, P = {} ({})", c.name, run.tokens,
                                         blocks, run.ranks, prop.name),
                             o.png);
    std::printf("wrote %s\n", o.png.c_str());
  }
}
#endif

// --plan: what the GPU path would do on P ranks (dit::plan_run), as a table and
// optionally JSON. Needs no GPU and runs nothing.
void run_plan(const DitCli& o, const dit::Config& c, const dit::Run& run) {
  const auto params = burstgap::read_params_or_default(o.params);
  const burstgap::ModelParams& peer = params.for_exchange(run.ranks);
  const dit::RunPlan plan = dit::plan_run(c, run, peer, o.sms);
  const int P = plan.ranks;
  const std::string ffn = c.ffn == dit::Ffn::moe
                              ? fmt::format("MoE {} experts top-{}, intermediate {}", c.experts, c.topk, c.moe_inter)
                              : fmt::format("GELU MLP {}", c.ffn_hidden);
  const std::string padding = plan.padded > plan.tokens ? fmt::format("padded to {}", plan.padded) : "no padding";
  fmt::print("plan: {}, {} tokens on P = {} ({}, {} per rank), {} blocks, hidden {}, {} heads x {}, {}; {} SMs; "
             "Burst-Gap {}/{} fitted on {} GPUs (drain {:.0f} GB/s)\n",
             c.name, plan.tokens, P, padding, plan.per_rank, plan.blocks, c.hidden, c.heads, c.head_dim, ffn, plan.sms,
             peer.pattern, peer.store, peer.gpus, peer.drain_GBps);
  auto range = [](int64_t first, int64_t n) {
    return n == 1 ? std::to_string(first) : fmt::format("{}-{}", first, first + n - 1);
  };
  fmt::print("{:>4} {:>15} {:>7} {:>7} {:>7} | {:>13} {:>8} {:>11} | {:>13} {:>8} {:>11}\n", "rank", "tokens", "real",
             "padding", "heads", "QKV kernel", "CTAs", "stall us", "attention", "CTAs", "stall us");
  for (const dit::RankPlan& r : plan.rank) {
    const std::string qkv = r.qkv_fused ? (P > 1 ? "fused + A2A" : "fused") : "cuBLAS";
    const std::string attn = P > 1 ? "fused + A2A" : "one GPU";
    fmt::print("{:>4} {:>15} {:>7} {:>7} {:>7} | {:>13} {:>8} {:>11} | {:>13} {:>8} {:>11}\n", r.rank,
               range(r.row0, r.real + r.padding), r.real, r.padding, range(r.head0, r.heads), qkv, r.qkv_fused ? std::to_string(r.qkv_grid) : "-",
               r.qkv_fused ? fmt::format("{:.2f}", r.qkv_stall_ns / 1e3) : "-", attn,
               P > 1 ? std::to_string(r.attention_grid) : "-",
               P > 1 ? fmt::format("{:.2f}", r.attention_stall_ns / 1e3) : "-");
  }
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
  if (o.plan_json.empty()) return;
  nlohmann::json ranks = nlohmann::json::array();
  for (const dit::RankPlan& r : plan.rank)
    ranks.push_back({{"rank", r.rank},
                     {"row0", r.row0},
                     {"real", r.real},
                     {"padding", r.padding},
                     {"head0", r.head0},
                     {"heads", r.heads},
                     {"qkv_fused", r.qkv_fused},
                     {"qkv_grid", r.qkv_grid},
                     {"qkv_predicted_stall_us", r.qkv_stall_ns / 1e3},
                     {"qkv_order", r.qkv_order},
                     {"attention_grid", r.attention_grid},
                     {"attention_predicted_stall_us", r.attention_stall_ns / 1e3},
                     {"attention_order", r.attention_order}});
  nlohmann::json j = {{"date", today_utc()},
                      {"command", command_line()},
                      {"preset", c.name},
                      {"tokens", plan.tokens},
                      {"padded_tokens", plan.padded},
                      {"P", P},
                      {"blocks", plan.blocks},
                      {"sms", plan.sms},
                      {"burstgap", {{"pattern", peer.pattern}, {"store", peer.store}, {"gpus", peer.gpus},
                                    {"drain_GBps", peer.drain_GBps}}},
                      {"ranks", ranks},
                      {"per_block_per_rank",
                       {{"pre_a2a_bytes", plan.pre_a2a_bytes},
                        {"post_a2a_bytes", plan.post_a2a_bytes},
                        {"moe_dispatch_bytes", plan.moe_dispatch_bytes},
                        {"moe_combine_bytes", plan.moe_combine_bytes},
                        {"gemm_flops", plan.gemm_flops},
                        {"attention_flops", plan.attention_flops}}}};
  if (plan.moe)
    j["moe"] = {{"interleaved", plan.moe_interleaved},
                {"interleaved_predicted_stall_us", plan.moe_interleaved_stall_ns / 1e3},
                {"expert_wave", plan.moe_expert_wave},
                {"expert_wave_predicted_stall_us", plan.moe_expert_wave_stall_ns / 1e3}};
  common::write_file_atomic(o.plan_json, j.dump(2) + "\n");
  fmt::print("wrote {}\n", o.plan_json);
}

void run(const DitCli& o) {
  XS_ASSERT(o.moe_raster >= 1, "dit: --moe-raster must be >= 1 (got {})", o.moe_raster);
  dit::Config c = dit::preset(o.preset);
  c.moe_raster_group = o.moe_raster;
  XS_ASSERT(o.moe_routing == "device" || o.moe_routing == "host", "dit: --moe-routing is device or host (got '{}')",
            o.moe_routing);
  c.moe_device_routing = o.moe_routing == "device";
  c.gemm_epilogues = o.gemm_epilogues == "fused";
  const dit::Run run{o.tokens, o.gpus, o.steps, o.blocks, o.pad_multiple};
  XS_ASSERT(!(o.cpu && o.breakdown), "dit: --breakdown times the GPU path's phases; it does not go with --cpu");
  XS_ASSERT(o.png.empty() || o.breakdown, "dit: --png draws --breakdown's phases; give --breakdown too");
  check_outputs("dit", o.json, o.png);  // before the run: a bad path loses no figure
  XS_ASSERT(o.plan_json.empty() || o.plan, "dit: --plan-json writes --plan's plan; give --plan too");
  if (o.plan) {
    XS_ASSERT(!o.cpu && !o.breakdown && o.json.empty() && o.png.empty(),
              "dit: --plan runs nothing; it does not go with --cpu, --breakdown, --json or --png");
    if (!o.plan_json.empty()) common::check_output_path(o.plan_json, "dit: --plan-json");
    return run_plan(o, c, run);
  }
  if (o.cpu) return run_cpu(o, c, run);
#ifdef XSTAGE_HAVE_CUDA
  run_gpus(o, c, run);
#else
  XS_FAIL("dit: this xstage was built without CUDA; the CPU reference runs with --preset tiny --cpu");
#endif
}

struct QkvCli {
  std::vector<int64_t> seqs{4096, 16384, 75776};
  std::vector<int> ranks{2, 4};
  std::vector<int> heads{24, 40};
  int rank = 0;
  int warmup = 2, samples = 7;
  std::vector<int> groups{0};
  int count_checks = 1;
  std::string params;
  std::string json = "docs/results/qkv_kernel.json";
};

void run_qkv(const QkvCli& c) {
#ifdef XSTAGE_HAVE_CUDA
  const auto params = burstgap::read_params_or_default(c.params);
  XS_ASSERT(c.warmup >= 0 && c.samples >= 1, "bench qkv: --warmup must be >= 0 and --samples >= 1");
  XS_ASSERT(!c.groups.empty() && std::all_of(c.groups.begin(), c.groups.end(), [](int g) { return g >= 0; }),
            "bench qkv: --groups needs raster groups >= 0 (0: the L2 rule)");
  struct Config {
    int64_t S;
    int P, H;
  };
  std::vector<Config> configs;
  for (int P : c.ranks)
    for (int H : c.heads)
      for (int64_t S : c.seqs) configs.push_back({S, P, H});
  cudaDeviceProp prop{};
  XS_CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("bench qkv: rank %d's QKV projection on one GPU (%s), no peers; fused = GEMM + norms + RoPE + stores "
              "to the owners (here all local) in one kernel\n",
              c.rank, prop.name);
  std::string extra_head;
  for (std::size_t i = 1; i < c.groups.size(); ++i)
    extra_head += fmt::format(" {:>9}", fmt::format("g{}", c.groups[i]));
  std::printf("%6s %2s %3s | %10s %10s %3s %7s %7s | %10s %9s %6s | %9s %9s %9s%s\n", "S", "P", "H", "cublas+nr", "fused",
              "g", "ratio", "TFLOP/s", "max|diff|", "elems off", "counts", "unsplit", "consumer",
              fmt::format("sleep{}", dit::kQkvCompareAgentSleepNs).c_str(), extra_head.c_str());
  nlohmann::json rows = nlohmann::json::array();
  bool ok = true;
  common::ProgressBar progress("bench qkv", configs.size());
  for (const auto& cf : configs) {
    const dit::QkvBenchRow r = dit::run_qkv_bench(cf.S, cf.P, cf.H, c.rank, params.for_exchange(cf.P), c.warmup, c.samples, c.groups,
                                                  c.count_checks);
    progress.tick();
    std::string extra;
    nlohmann::json by_group = nlohmann::json::object();
    for (std::size_t i = 0; i < r.fused_by_group.size(); ++i) {
      by_group[std::to_string(r.fused_by_group[i].first)] = r.fused_by_group[i].second;
      if (i > 0) extra += fmt::format(" {:9.4f}", r.fused_by_group[i].second);
    }
    const std::string unsplit = r.split_tail ? fmt::format("{:9.4f}", r.fused_unsplit_ms) : fmt::format("{:>9}", "-");
    std::printf("%6ld %2d %3d | %10.4f %10.4f %3d %7.3f %7.1f | %10.4g %9ld %6s | %s %9.4f %9.4f%s\n", long(cf.S), cf.P,
                cf.H, r.cublas_norm_rope_ms, r.fused_loopback_ms, r.group, r.fused_loopback_ms / r.cublas_norm_rope_ms,
                r.tflops_fused, r.max_abs_diff, long(r.elements_off), r.counts_ok() ? "ok" : "WRONG", unsplit.c_str(),
                r.fused_by_consumer_ms, r.fused_compare_sleep_ms, extra.c_str());
    std::fflush(stdout);
    if (!r.counts_ok()) std::printf("  miscounted: %s\n", r.count_errors.c_str());
    ok = ok && r.counts_ok() && r.elements_off == 0;
    rows.push_back({{"S", cf.S},
                    {"P", cf.P},
                    {"H", cf.H},
                    {"D", 128},
                    {"rank", r.rank},
                    {"cublas_norm_rope_ms", r.cublas_norm_rope_ms},
                    {"fused_loopback_ms", r.fused_loopback_ms},
                    {"fused_tflops", r.tflops_fused},
                    {"max_abs_diff_vs_cublas_path", r.max_abs_diff},
                    {"elements_beyond_one_bf16_step", r.elements_off},
                    {"signal_counts_ok", r.counts_ok()},
                    {"signal_count_errors", r.count_errors},
                    {"raster_group", r.group},
                    {"fused_ms_by_raster_group", by_group},
                    {"split_tail", r.split_tail},
                    {"fused_unsplit_ms", r.split_tail ? nlohmann::json(r.fused_unsplit_ms) : nlohmann::json()},
                    {"fused_released_by_consumers_ms", r.fused_by_consumer_ms},
                    {"fused_agent_compare_sleep_ms", r.fused_compare_sleep_ms},
                    {"agent_max_sleep_ns",
                     {{"fused_loopback_ms", r.agent_max_sleep_ns},
                      {"fused_agent_compare_sleep_ms", dit::kQkvCompareAgentSleepNs}}},
                    {"order", r.order}});
    if (!c.json.empty()) {
      const nlohmann::json out = {{"card", prop.name},
                                  {"gpus", 1},
                                  {"date", today_utc()},
                                  {"command", command_line()},
                                  {"timed", "one GPU, no peers: rank's rows [S/P, C] -> q, k, v; medians of CUDA-event "
                                            "timed launches taken in turns (bench_timing.hpp)"},
                                  {"complete", rows.size() == configs.size()},
                                  {"rows", rows}};
      common::write_file_atomic(c.json, out.dump(2) + "\n");
    }
  }
  if (!c.json.empty()) std::printf("wrote %s\n", c.json.c_str());
  XS_ASSERT(ok, "bench qkv: the fused kernel disagreed with the cuBLAS path or miscounted its signals (see the table)");
#else
  (void)c;
  XS_FAIL("bench qkv: this xstage was built without CUDA");
#endif
}

}  // namespace

void add_dit_commands(CLI::App& app) {
  {
    auto* cmd = bench_group(app)->add_subcommand(
        "qkv", "The QKV projection with the pre-attention All-to-All fused in, on one GPU, against cuBLAS + "
               "qk_norm_rope (D = 128)");
    auto q = std::make_shared<QkvCli>();
    cmd->add_option("--seq", q->seqs, "Full sequence lengths S")->delimiter(',')->capture_default_str();
    cmd->add_option("--ranks", q->ranks, "Ranks P whose share is timed")->delimiter(',')->capture_default_str();
    cmd->add_option("--heads", q->heads, "Heads H (C = 128 H)")->delimiter(',')->capture_default_str();
    cmd->add_option("--rank", q->rank, "Whose share and tile order")->capture_default_str();
    cmd->add_option("--groups", q->groups,
                    "Raster groups (m blocks) of the fused orders timed, comma-separated; the first is the "
                    "headline, 0 = the L2 rule")
        ->delimiter(',')
        ->capture_default_str();
    cmd->add_option("--warmup", q->warmup, "Warm-up launches per variant")->capture_default_str();
    cmd->add_option("--samples", q->samples, "Timed samples per variant (median)")->capture_default_str();
    cmd->add_option("--count-checks", q->count_checks,
                    "Launches per release mode and order whose completion counters are checked")
        ->check(CLI::Range(1, 100000))
        ->capture_default_str();
    cmd->add_option("--params", q->params, "Burst-Gap parameters (default: xstage/data/h200_params.json)");
    cmd->add_option("--json", q->json, "Results file (rewritten after every row)")->capture_default_str();
    cmd->callback([q] {
      check_outputs("bench qkv", q->json);
      run_qkv(*q);
    });
  }
  auto* cmd = app.add_subcommand("dit", "DiT denoiser over Ulysses SP GPUs: per-step latency of the serial and "
                                        "fused post-attention All-to-All, speedup, difference to one GPU");
  auto o = std::make_shared<DitCli>();
  cmd->add_option("--preset", o->preset, "tiny, tiny-video, tiny-moe, flux-like, wan-like, dit-moe")
      ->capture_default_str();
  cmd->add_option("--tokens", o->tokens,
                  "Latent tokens N (a multiple of the preset's frames; with --gpus P > 1 the ranks pad it to a "
                  "multiple of 128 P)")->capture_default_str();
  cmd->add_option("--steps", o->steps, "Euler steps of the sampler")->capture_default_str();
  cmd->add_option("--gpus", o->gpus, "Ranks P (one per GPU); P > 1 also runs P = 1 for the difference")
      ->capture_default_str();
  cmd->add_option("--blocks", o->blocks, "Blocks used (0: all of the preset)")->capture_default_str();
  cmd->add_option("--pad-multiple", o->pad_multiple,
                  "Also pad the tokens to a multiple of this, P = 1 included (0: only the padding P > 1 needs); "
                  "the padding is masked as keys and dropped from the output")
      ->capture_default_str();
  cmd->add_flag("--serial", o->serial_only, "Serial post-attention All-to-All only (no fused run, no speedup)");
  cmd->add_flag("--cpu", o->cpu, "The fp32 CPU reference instead (tiny presets, one rank)");
  cmd->add_option("--seed", o->seed, "Weights seed (the latent uses seed + 1)")->capture_default_str();
  cmd->add_option("--weights", o->weights, "Load weights from a safetensors file instead of random ones");
  cmd->add_option("--save-weights", o->save_weights, "Write the weights used to a safetensors file");
  cmd->add_option("--save-dtype", o->save_dtype, "f32 or bf16")->capture_default_str();
  cmd->add_option("--params", o->params, "Burst-Gap parameters (default: xstage/data/h200_params.json)");
  cmd->add_option("--warmup", o->warmup, "Warm-up steps before timing")->capture_default_str();
  cmd->add_option("--samples", o->samples, "Timed steps (median)")->capture_default_str();
  cmd->add_option("--json", o->json, "Append rows to this results file (docs/results/dit.json format)");
  cmd->add_option("--moe-raster", o->moe_raster,
                  "MoE presets: m blocks per raster group of the fused MoE kernel's tiles (1: m-major)")
      ->capture_default_str();
  cmd->add_option("--moe-routing", o->moe_routing,
                  "MoE presets: routing, layout and tile order on the GPU (device) or on the host, one round trip "
                  "per block (host)")
      ->capture_default_str();
  cmd->add_option("--gemm-epilogues", o->gemm_epilogues,
                  "The GEMM tails: the attention projection's bias, and for GELU MLP presets fc1's bias + GELU and "
                  "fc2's bias, in cuBLASLt epilogues with bf16 outputs (fused), or cuBLAS GEMMs with fp32 outputs "
                  "and kernels of their own (separate); and at P = 1 with head dim 128 the QKV projection as the "
                  "fused QKV kernel (GEMM, bias, norms, RoPE) or as cuBLAS + qk_norm_rope")
      ->check(CLI::IsMember({"fused", "separate"}))
      ->capture_default_str();
  cmd->add_flag("--plan", o->plan,
                "Print what the GPU path would do on --gpus P ranks and exit, no GPU needed: each rank's tokens and "
                "heads, the fused kernels' tile orders and the stalls the Burst-Gap model predicts for them, the MoE "
                "schedules, bytes and FLOPs per block");
  cmd->add_option("--plan-json", o->plan_json, "With --plan: the plan as JSON too");
  cmd->add_option("--sms", o->sms, "With --plan: the GPU's SM count (H200: 132)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_flag("--breakdown", o->breakdown,
                "After the timed steps, as many more with a CUDA event after each phase: ms per phase and path "
                "(table, and phases_ms_per_step in the JSON row)");
  cmd->add_option("--png", o->png, "With --breakdown: a chart of each path's phases (ms per step) to this PNG");
  cmd->add_flag("--quiet", o->quiet, "No progress bar");
  cmd->callback([o] { run(*o); });
}

}  // namespace xstage::cli
