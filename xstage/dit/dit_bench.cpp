// `xstage dit` on GPUs (xstage/bench/dit_bench.hpp): P = 1, then with P > 1 the serial
// and fused paths, each the median step of the slowest rank (dit_run.cpp); a table
// line and a results row per P, the --breakdown phases and the MoE FFN's times after
// the table, then the rows into the results file and the phases chart.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cmath>
#include <cstdio>

#include "common/check.hpp"
#include "common/cuda_check.hpp"
#include "xstage/bench/dit_bench.hpp"
#include "xstage/comm/comm.hpp"
#include "xstage/dit/dit_cuda.hpp"

namespace xstage::dit {

namespace {

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  XS_ASSERT(a.size() == b.size(), "dit: comparing {} with {} values", a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, double(std::fabs(a[i] - b[i])));
  return m;
}

// What the runs collect for the report after the table.
struct Collected {
  nlohmann::json rows = nlohmann::json::array();
  std::vector<std::pair<std::string, MoeTimes>> moe;          // per path
  std::vector<std::pair<std::string, PhaseTimes>> phases;     // per path, --breakdown
};

// A path's MoE FFN times per block (GPU; and the host round trip with host routing) and
// its --breakdown phases, into the row and the report.
void add_path(const CommandOptions& o, nlohmann::json& row, const std::string& path, const GpuResult& g, Collected& c) {
  if (o.config.ffn == Ffn::moe) {
    const MoeTimes& t = g.moe_host;
    row["moe_gpu_us_per_block"][path] = {{"plan", t.plan_gpu_us}, {"kernel", t.kernel_gpu_us}};
    if (!o.config.moe_device_routing)
      row["moe_host_us_per_block"][path] = {{"wait", t.wait_us}, {"route", t.route_us}, {"upload_launch", t.upload_us}};
    c.moe.push_back({path, t});
  }
  if (!o.breakdown) return;
  nlohmann::json ph = nlohmann::json::object();
  for (int i = 0; i < kPhases; ++i) ph[to_string(Phase(i))] = g.phases.per_step(Phase(i));
  row["phases_ms_per_step"][path] = ph;
  c.phases.push_back({path, g.phases});
}

// The row's keys: the configuration at P and how the single GPU ran.
nlohmann::json row_at(const CommandOptions& o, int P, int blocks, const GpuResult& single) {
  Run at = o.run;
  at.ranks = P;
  nlohmann::json j{{"preset", o.config.name}, {"tokens", o.run.tokens}, {"padded_tokens", padded_tokens(o.config, at)},
                   {"P", P}, {"blocks", blocks}, {"steps", o.run.steps}, {"single_step_ms", single.step_ms},
                   {"gemm_epilogues", single.gemm_epilogues}, {"single_qkv_projection", single.qkv_projection}};
  if (o.config.ffn == Ffn::moe) j["moe_routing"] = o.config.moe_device_routing ? "device" : "host";
  return j;
}

const bench::Table kTable({{"preset", 10, "", true}, {"tokens", 6}, {"P", 2}, {"blocks", 6},
                           {"single ms", 9, ".3f", false, true}, {"serial ms", 9, ".3f"}, {"fused ms", 9, ".3f"},
                           {"speedup", 7, ".3f", false, true}, {"diff ser", 10, ".3e", false, true},
                           {"diff fus", 10, ".3e"}});

// P > 1: the serial and (unless serial_only) fused paths against the single GPU.
void run_parallel(const CommandOptions& o, const GpuOptions& opt, int blocks, const GpuResult& single, Collected& c) {
  const GpuResult serial = run_gpu(o.config, o.run, AttnPath::serial, opt);
  GpuResult fused;
  if (!o.serial_only) fused = run_gpu(o.config, o.run, AttnPath::fused, opt);
  const double ds = max_abs_diff(serial.latent, single.latent);
  const std::optional<double> df = o.serial_only ? std::nullopt : std::optional(max_abs_diff(fused.latent, single.latent));
  const std::optional<double> fused_ms = o.serial_only ? std::nullopt : std::optional(fused.step_ms);
  const std::optional<double> speedup = o.serial_only ? std::nullopt : std::optional(serial.step_ms / fused.step_ms);
  nlohmann::json r = row_at(o, o.run.ranks, blocks, single);
  r.update({{"serial_step_ms", serial.step_ms}, {"fused_step_ms", bench::json_or_null(fused_ms)},
            {"speedup", bench::json_or_null(speedup)}, {"max_abs_diff_vs_single_gpu", df.value_or(ds)},
            {"max_abs_diff_serial_vs_single_gpu", ds}, {"latent_max_abs", max_abs(single.latent)}});
  add_path(o, r, "serial", serial, c);
  if (!o.serial_only) add_path(o, r, "fused", fused, c);
  c.rows.push_back(r);
  std::printf("%s\n", kTable.line({o.config.name, (long long)o.run.tokens, o.run.ranks, blocks, single.step_ms,
                                   serial.step_ms, bench::cell(fused_ms), bench::cell(speedup), ds, bench::cell(df)})
                          .c_str());
}

// --breakdown: each path's phases per step and their shares.
void print_phases(const std::vector<std::pair<std::string, PhaseTimes>>& cols, int samples) {
  std::printf("where a step's time goes (ms per step; %d more steps with a CUDA event after each phase, the slowest "
              "rank; qkv and attention hold the fused path's All-to-Alls):\n%-13s",
              samples, "phase");
  for (const auto& [path, t] : cols) std::printf(" %9s %6s", path.c_str(), "share");
  std::printf("\n");
  for (int i = 0; i < kPhases; ++i) {
    std::printf("%-13s", to_string(Phase(i)));
    for (const auto& [path, t] : cols) {
      const double v = t.per_step(Phase(i)), tot = t.total_per_step();
      std::printf(" %9.3f %5.1f%%", v, tot > 0 ? 100 * v / tot : 0.0);
    }
    std::printf("\n");
  }
  std::printf("%-13s", "sum");
  for (const auto& [path, t] : cols) std::printf(" %9.3f %6s", t.total_per_step(), "");
  std::printf("\n");
}

void print_moe(const CommandOptions& o, const std::vector<std::pair<std::string, MoeTimes>>& lines) {
  if (o.config.ffn == Ffn::moe && o.config.moe_device_routing)
    std::printf("MoE FFN: routing, layout and tile order on the GPU (no host round trip; --moe-routing host for "
                "the round trip)\n");
  for (const auto& [path, t] : lines) {
    std::printf("MoE FFN on the GPU per block (%s, timed steps, slowest rank): planner %.1f us, kernel %.1f us\n",
                path.c_str(), t.plan_gpu_us, t.kernel_gpu_us);
    if (!o.config.moe_device_routing)
      std::printf("MoE FFN host round trip per block (%s, timed steps, slowest rank): wait for the router logits "
                  "%.1f us, routing + layout + order %.1f us, upload + launch %.1f us (the GPU idles for the last "
                  "two)\n",
                  path.c_str(), t.wait_us, t.route_us, t.upload_us);
  }
}

// What runs and how it is padded, before the table.
void print_run(const CommandOptions& o, int blocks, const std::string& card) {
  const Config& c = o.config;
  const Run& run = o.run;
  const Grid g = token_grid(c, run.tokens);
  std::printf("dit: %s, %ld tokens (%ldx%ldx%ld), %d of %d blocks, %d steps, P = %d on %s\n", c.name.c_str(),
              long(run.tokens), long(g.t), long(g.h), long(g.w), blocks, c.blocks, run.steps, run.ranks, card.c_str());
  const int64_t padded = padded_tokens(c, run);
  if (padded > run.tokens)
    std::printf("dit: the ranks pad the sequence to %ld tokens (%ld per rank at P = %d%s); the %ld padding tokens are "
                "masked as keys and dropped from the output\n",
                long(padded), long(padded / run.ranks), run.ranks,
                run.pad_multiple > 0 ? ", --pad-multiple"
                : run.ranks > 1      ? ": whole 128-row attention tiles"
                                     : ": whole 128-row tiles of the fused QKV projection",
                long(padded - run.tokens));
}

}  // namespace

void run_gpus(const CommandOptions& o) {
  validate(o.config, o.run, true);  // shapes first: they are wrong on any machine
  const int gpus = comm::visible_gpus();
  XS_ASSERT(gpus > 0, "dit: no CUDA GPU is visible; the CPU reference runs with --preset tiny --cpu");
  validate(o.config, o.run, true, gpus);
  cudaDeviceProp prop{};
  XS_CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  bench::ResultsFile file(o.json, bench::run_head(prop.name, gpus, o.command));
  file.set("timed", "one Euler step (conditioning, all blocks, final layer, update) per rank, CUDA events; median of "
                    "the slowest rank; serial/fused: the Ulysses layer's post-attention All-to-All");
  file.keep_other_rows(results_key);  // an unreadable file fails now, before the run
  const int blocks = blocks_used(o.config, o.run);
  Weights w;
  GpuOptions opt{.weight_seed = o.seed, .latent_seed = o.seed + 1, .params = o.params, .warmup = o.warmup,
                 .samples = o.samples, .progress = !o.quiet, .breakdown_steps = o.breakdown ? o.samples : 0};
  if (!o.weights.empty() || !o.save_weights.empty()) {
    w = host_weights(o, blocks);
    opt.weights = &w;
  }
  print_run(o, blocks, prop.name);

  Run one = o.run;
  one.ranks = 1;
  const GpuResult single = run_gpu(o.config, one, AttnPath::single, opt);
  Collected c;
  nlohmann::json r1 = row_at(o, 1, blocks, single);
  add_path(o, r1, "single", single, c);
  r1.update({{"serial_step_ms", nullptr}, {"fused_step_ms", nullptr}, {"speedup", nullptr},
             {"max_abs_diff_vs_single_gpu", 0.0}, {"latent_max_abs", max_abs(single.latent)}});
  c.rows.push_back(r1);
  std::printf("%s\n%s\n", kTable.header().c_str(),
              kTable.line({o.config.name, (long long)o.run.tokens, 1, blocks, single.step_ms, {}, {}, {}, {}, {}}).c_str());
  if (o.run.ranks > 1) run_parallel(o, opt, blocks, single, c);
  std::printf("per-step latency: median of %d steps after %d warm-up, slowest rank; diff: max |x_P - x_1| of the "
              "final latent (max |x_1| %.3f); GEMM tails: %s; P = 1 QKV projection: %s\n",
              o.samples, o.warmup, max_abs(single.latent), single.gemm_epilogues.c_str(), single.qkv_projection.c_str());
  if (!c.phases.empty()) print_phases(c.phases, o.samples);
  print_moe(o, c.moe);
  if (!o.json.empty()) {
    for (const auto& row : c.rows) file.add(row);
    file.write();
    std::printf("wrote %s (%zu rows)\n", o.json.c_str(), file.rows_written());
  }
  if (!o.png.empty() && !c.phases.empty()) {  // after the rows: a chart that fails loses no figure
    write_breakdown_png(c.phases,
                        fmt::format("xstage dit: {}, {} tokens, {} blocks, P = {} ({})", o.config.name, o.run.tokens,
                                    blocks, o.run.ranks, prop.name),
                        o.png);
    std::printf("wrote %s\n", o.png.c_str());
  }
}

}  // namespace xstage::dit
