// `xstage bench moe`: the fused EP MoE (both schedules) vs the unfused baseline
// over the sweep; one table row per configuration, JSON and a PNG of the
// Interleaved / Expert-Wave speedup. --ep / --tokens / --routing filter the sweep;
// --budget-s stops starting new rows after that many seconds (the JSON is
// rewritten after every row, so a killed run keeps what it measured).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "common/check.hpp"
#include "common/files.hpp"
#include "common/plot.hpp"
#include "xstage/burstgap.hpp"

#ifdef XSTAGE_HAVE_CUDA
#include <cuda_runtime.h>

#include "xstage/moe_bench.hpp"
#endif

namespace xstage::cli {

namespace {

struct MoeCli {
  std::string sweep = "standard";
  std::string params;  // default: <source>/xstage/data/h200_params.json
  std::string json = "docs/results/moe.json";
  std::string png = "docs/results/moe_speedup.png";
  int warmup = 2, iters = 10, only = -1;
  std::vector<int> ep, tokens;         // empty: all
  std::vector<std::string> routing;    // empty: all
  double budget_s = 0;                 // 0: no limit
  int compare_raster = 0;              // 0: none
  bool device_routing = false;
  bool compare_dispatch = false;
  bool compare_release = false;
  bool profile = false;
  int blocks = 0;  // 0: one persistent CTA per SM
};

// The profile plot's path: next to the speedup plot (x.png -> x_profile.png).
std::string profile_png(const std::string& png) {
  if (png.empty()) return "";
  const std::filesystem::path p(png);
  return (p.parent_path() / (p.stem().string() + "_profile" + p.extension().string())).string();
}

bool keep(const std::vector<int>& allowed, int v) {
  return allowed.empty() || std::find(allowed.begin(), allowed.end(), v) != allowed.end();
}

#ifdef XSTAGE_HAVE_CUDA
void run(const MoeCli& c) {
  const auto params = burstgap::read_params_or_default(c.params);
  auto configs = moe::bench_sweep(c.sweep);
  if (c.only >= 0) {
    XS_ASSERT(c.only < int(configs.size()), "bench moe: --only {} but the sweep has {} rows", c.only, configs.size());
    configs = {configs[c.only]};
  }
  std::erase_if(configs, [&](const moe::BenchConfig& b) {
    return !keep(c.ep, b.ep) || !keep(c.tokens, b.tokens_per_rank) ||
           !(c.routing.empty() || std::find(c.routing.begin(), c.routing.end(), b.routing) != c.routing.end());
  });
  XS_ASSERT(!configs.empty(), "bench moe: the filters leave no configuration of sweep '{}'", c.sweep);
  XS_ASSERT(c.budget_s >= 0, "bench moe: --budget-s must be >= 0 (got {})", c.budget_s);
  XS_ASSERT(c.compare_raster >= 0, "bench moe: --compare-raster must be >= 0 (got {})", c.compare_raster);
  const auto t0 = std::chrono::steady_clock::now();
  cudaDeviceProp prop{};
  XS_ASSERT(cudaGetDeviceProperties(&prop, 0) == cudaSuccess, "bench moe: no CUDA device");
  std::string cmp_head =
      c.compare_raster > 0 ? fmt::format(" | {:>9} {:>6}", fmt::format("IL g{}", c.compare_raster), "gain") : "";
  if (c.device_routing) cmp_head += fmt::format(" | {:>9} {:>7} {:>3}", "logits us", "plan us", "eq");
  if (c.compare_dispatch) cmp_head += fmt::format(" | {:>9} {:>6} {:>9} {:>6}", "IL before", "gain", "IL block", "gain");
  if (c.compare_release) cmp_head += fmt::format(" | {:>9} {:>6}", "IL cons.", "gain");
  if (c.profile) cmp_head += fmt::format(" | {:>5} {:>5} {:>5} {:>5} {:>5} {:>5}", "wait%", "main%", "tma%", "epi%", "comb%", "start%");
  std::printf("%5s %5s %3s %5s %5s %2s %-7s | %9s %9s %9s | %6s %7s %7s %8s %s%s\n", "T", "E", "k", "hid", "I", "P",
              "routing", "EW us", "IL us", "unf us", "IL/EW", "TFLOPs", "GEMM TF", "NVL GB/s", "ok", cmp_head.c_str());
  nlohmann::json rows = nlohmann::json::array();
  std::vector<double> xs, speedups, raster_gains, from_logits, planner_share, before_gains, by_block_gains,
      release_gains;
  std::vector<double> prof_item, prof_main, prof_stage, prof_epi, prof_comb, prof_start;
  double log_sum = 0, max_speedup = 0;
  int all_ok = 1;
  int gpus = 0;
  cudaGetDeviceCount(&gpus);
  std::size_t done = 0;
  auto write_json = [&](bool final_write) {
    const double geomean = std::exp(log_sum / std::max<std::size_t>(1, done));
    nlohmann::json out = {{"card", prop.name},        {"gpus", gpus},
                          {"date", today_utc()},      {"command", command_line()},
                          {"geomean_speedup", geomean}, {"max_speedup", max_speedup},
                          {"all_correct", bool(all_ok)}, {"rows_planned", configs.size()},
                          {"complete", final_write && done == configs.size()}, {"rows", rows}};
    if (c.json.empty()) return;
    common::write_file_atomic(c.json, out.dump(2) + "\n");
  };
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const auto& b = configs[i];
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (c.budget_s > 0 && elapsed > c.budget_s) {
      std::printf("budget of %.0f s spent after %zu of %zu configurations: stopping\n", c.budget_s, done,
                  configs.size());
      break;
    }
    const auto r = moe::run_bench(b, params.for_exchange(b.ep),
                                  {.warmup = c.warmup, .iters = c.iters, .compare_raster = c.compare_raster,
                                   .device_routing = c.device_routing, .compare_dispatch = c.compare_dispatch,
                                   .compare_release = c.compare_release, .profile = c.profile,
                                   .blocks = c.blocks});
    std::string cmp = c.compare_raster > 0 ? fmt::format(" | {:9.1f} {:6.3f}", r.interleaved_compare_raster_us,
                                                        r.interleaved_compare_raster_us / r.interleaved_us)
                                           : "";
    if (c.device_routing)
      cmp += fmt::format(" | {:9.1f} {:7.1f} {:>3}", r.from_logits_us, r.planner_us, r.from_logits_bitwise ? "yes" : "NO");
    if (c.compare_dispatch)
      cmp += fmt::format(" | {:9.1f} {:6.3f} {:9.1f} {:6.3f}", r.interleaved_before_tiles_us,
                         r.interleaved_before_tiles_us / r.interleaved_us, r.interleaved_by_block_us,
                         r.interleaved_by_block_us / r.interleaved_us);
    if (c.compare_release)
      cmp += fmt::format(" | {:9.1f} {:6.3f}", r.interleaved_release_by_consumer_us,
                         r.interleaved_release_by_consumer_us / r.interleaved_us);
    const moe::KernelProfile& pf = r.profile;
    if (c.profile)
      cmp += fmt::format(" | {:5.1f} {:5.1f} {:5.1f} {:5.1f} {:5.1f} {:5.1f}", 100 * pf.item_wait, 100 * pf.mainloop,
                         100 * pf.stage_wait, 100 * pf.epilogue, 100 * (pf.combine_wait + pf.combine), 100 * pf.start);
    std::printf("%5d %5d %3d %5d %5d %2d %-7s | %9.1f %9.1f %9.1f | %6.3f %7.1f %7.1f %8.1f %s%s\n", b.tokens_per_rank,
                b.experts, b.topk, b.hidden, b.intermediate, b.ep, b.routing.c_str(), r.expert_wave_us,
                r.interleaved_us, r.unfused_us, r.speedup, r.tflops, r.gemm_tflops, r.nvlink_GBps,
                r.correct ? "yes" : "NO", cmp.c_str());
    std::fflush(stdout);
    all_ok &= r.correct && (!c.device_routing || r.from_logits_bitwise);
    log_sum += std::log(r.speedup);
    max_speedup = std::max(max_speedup, r.speedup);
    xs.push_back(double(i));
    speedups.push_back(r.speedup);
    if (c.compare_raster > 0) raster_gains.push_back(r.interleaved_compare_raster_us / r.interleaved_us);
    if (c.compare_dispatch) {
      before_gains.push_back(r.interleaved_before_tiles_us / r.interleaved_us);
      by_block_gains.push_back(r.interleaved_by_block_us / r.interleaved_us);
    }
    if (c.compare_release) release_gains.push_back(r.interleaved_release_by_consumer_us / r.interleaved_us);
    if (c.profile) {
      prof_item.push_back(pf.item_wait);
      prof_main.push_back(pf.mainloop - pf.stage_wait);
      prof_stage.push_back(pf.stage_wait);
      prof_epi.push_back(pf.epilogue);
      prof_comb.push_back(pf.combine_wait + pf.combine);
      prof_start.push_back(pf.start);
    }
    if (c.device_routing) {
      from_logits.push_back(r.interleaved_us / r.from_logits_us);
      planner_share.push_back(1.0 - r.planner_us / r.from_logits_us);
    }
    rows.push_back({{"tokens_per_rank", b.tokens_per_rank}, {"experts", b.experts}, {"topk", b.topk},
                    {"hidden", b.hidden}, {"intermediate", b.intermediate}, {"ep", b.ep}, {"routing", b.routing},
                    {"expert_wave_us", r.expert_wave_us}, {"interleaved_us", r.interleaved_us},
                    {"unfused_us", r.unfused_us}, {"grouped_gemm_us", r.grouped_gemm_us},
                    {"unfused_gemm", r.unfused_gemm}, {"speedup", r.speedup},
                    {"fused_over_unfused", r.unfused_us / std::min(r.expert_wave_us, r.interleaved_us)},
                    {"tflops", r.tflops}, {"gemm_tflops", r.gemm_tflops}, {"nvlink_GBps", r.nvlink_GBps},
                    {"max_rel_err", r.max_rel_err}, {"correct", r.correct},
                    {"raster_group", moe::kMoeRasterGroup}, {"fused_blocks", c.blocks > 0 ? nlohmann::json(c.blocks) : nlohmann::json("one per SM")},
                    {"interleaved_config",
                     {{"wave_experts", r.interleaved.wave_experts}, {"lag", r.interleaved.lag},
                      {"burst_split", r.interleaved.burst_split}, {"reason", r.interleaved.reason}}}});
    if (c.compare_raster > 0)
      rows.back()["compare_raster"] = {{"raster_group", c.compare_raster},
                                       {"interleaved_us", r.interleaved_compare_raster_us}};
    if (c.compare_dispatch)
      rows.back()["compare_dispatch"] = {{"before_tiles_us", r.interleaved_before_tiles_us},
                                         {"by_block_us", r.interleaved_by_block_us},
                                         {"gain_over_before_tiles", r.interleaved_before_tiles_us / r.interleaved_us},
                                         {"gain_over_by_block", r.interleaved_by_block_us / r.interleaved_us}};
    if (c.compare_release)
      rows.back()["compare_release"] = {
          {"by_consumer_us", r.interleaved_release_by_consumer_us},
          {"gain_over_by_consumer", r.interleaved_release_by_consumer_us / r.interleaved_us}};
    if (c.profile)
      rows.back()["interleaved_profile"] = {
          {"launches", pf.launches},
          {"items_per_warpgroup", pf.items_per_warpgroup},
          {"consumer_share",
           {{"start", pf.start}, {"item_wait", pf.item_wait}, {"mainloop", pf.mainloop},
            {"stage_wait_in_mainloop", pf.stage_wait}, {"epilogue", pf.epilogue},
            {"combine_wait", pf.combine_wait}, {"combine", pf.combine}}},
          {"producer_share",
           {{"dispatch_first", pf.producer_dispatch_first}, {"dependency_wait", pf.producer_dependency},
            {"ring_wait", pf.producer_ring}}},
          {"total_us_at_peak_clock", pf.total_us}};
    if (c.device_routing)
      rows.back()["from_logits"] = {{"us", r.from_logits_us},
                                    {"planner_us", r.planner_us},
                                    {"bitwise_equal_to_host_routed", r.from_logits_bitwise},
                                    {"planner_phase_us",
                                     {{"topk", r.planner_phase_us[0]}, {"allgather", r.planner_phase_us[1]},
                                      {"count", r.planner_phase_us[2]}, {"scan", r.planner_phase_us[3]},
                                      {"order", r.planner_phase_us[4]}, {"assign", r.planner_phase_us[5]}}},
                                    {"config",
                                     {{"wave_experts", r.from_logits_config.wave_experts},
                                      {"lag", r.from_logits_config.lag},
                                      {"burst_split", r.from_logits_config.burst_split}}}};
    ++done;
    write_json(false);
  }
  const double geomean = std::exp(log_sum / std::max<std::size_t>(1, done));
  std::printf("geometric mean Interleaved/Expert-Wave %.3fx, maximum %.3fx over %zu configurations%s\n", geomean,
              max_speedup, done, all_ok ? "" : " (SOME OUTPUTS WRONG)");
  auto summary = [](const char* what, const std::vector<double>& g) {
    if (g.empty()) return;
    double lg = 0;
    for (double v : g) lg += std::log(v);
    std::printf("%s geomean %.3fx (min %.3f, max %.3f)\n", what, std::exp(lg / double(g.size())),
                *std::min_element(g.begin(), g.end()), *std::max_element(g.begin(), g.end()));
  };
  summary("dispatch overlapped with the tiles: Interleaved dispatch before the tiles, a warp per row, / overlapped",
          before_gains);
  summary("dispatch overlapped with the tiles: Interleaved dispatch by whole CTAs (until session 8) / overlapped",
          by_block_gains);
  summary("release by the agent: Interleaved released by the consumers (until session 9) / by the agent",
          release_gains);
  write_json(true);
  if (!c.json.empty()) std::printf("wrote %s\n", c.json.c_str());
  if (!c.png.empty() && !xs.empty()) {
    common::plot::Chart chart;
    chart.title = fmt::format("MoE Interleaved / Expert-Wave ({}, geomean {:.2f}x)", prop.name, geomean);
    chart.x.label = "configuration";
    chart.y.label = "speedup";
    chart.series.push_back({.label = "Interleaved / Expert-Wave", .x = xs, .y = speedups,
                            .line = common::plot::LineStyle::none});
    if (!raster_gains.empty())
      chart.series.push_back({.label = fmt::format("Interleaved: raster group {} / {}", c.compare_raster,
                                                   moe::kMoeRasterGroup),
                              .x = xs, .y = raster_gains, .line = common::plot::LineStyle::none});
    if (!before_gains.empty()) {
      chart.series.push_back({.label = "Interleaved: dispatch before the tiles / overlapped", .x = xs,
                              .y = before_gains, .line = common::plot::LineStyle::none});
      chart.series.push_back({.label = "Interleaved: dispatch by whole CTAs / overlapped", .x = xs,
                              .y = by_block_gains, .line = common::plot::LineStyle::none});
    }
    if (!release_gains.empty())
      chart.series.push_back({.label = "Interleaved: released by the consumers / by the agent", .x = xs,
                              .y = release_gains, .line = common::plot::LineStyle::none});
    if (!from_logits.empty()) {
      chart.series.push_back({.label = "host-routed Interleaved / forward from logits (GPU routing)", .x = xs,
                              .y = from_logits, .line = common::plot::LineStyle::none});
      chart.series.push_back({.label = "1 - planner / forward from logits", .x = xs, .y = planner_share,
                              .line = common::plot::LineStyle::none});
    }
    chart.series.push_back(common::plot::horizontal_line("1x", 1.0, xs.front(), xs.back()));
    common::plot::write_chart(chart, c.png);
    std::printf("wrote %s\n", c.png.c_str());
    if (c.profile) {
      common::plot::Chart pc;
      pc.title = fmt::format("MoE Interleaved kernel: share of each consumer warpgroup's time ({})", prop.name);
      pc.x.label = "configuration";
      pc.y.label = "share of the warpgroup's time";
      pc.y.include_zero = true;
      pc.legend = common::plot::LegendPos::outside_right;
      pc.width = 1200;
      const std::pair<const char*, const std::vector<double>*> phases[] = {
          {"GEMM (mainloop less TMA waits)", &prof_main}, {"TMA waits in the mainloop", &prof_stage},
          {"epilogue", &prof_epi},                       {"waiting for an item", &prof_item},
          {"combine (wait + sum)", &prof_comb},          {"start and dispatch", &prof_start}};
      for (const auto& [label, v] : phases)
        pc.series.push_back({.label = label, .x = xs, .y = *v, .line = common::plot::LineStyle::none});
      const std::string ppng = profile_png(c.png);
      common::plot::write_chart(pc, ppng);
      std::printf("wrote %s\n", ppng.c_str());
    }
  }
}
#endif

}  // namespace

void add_moe_commands(CLI::App& app) {
  auto* bench = bench_group(app);
  auto* cmd = bench->add_subcommand("moe", "Fused EP MoE (Expert-Wave, Interleaved) vs the unfused NCCL+cuBLAS path");
  auto c = std::make_shared<MoeCli>();
  cmd->add_option("--sweep", c->sweep, "standard (192 configurations, EP 2 and 4), eight or one (the same 96 at EP 8 or 1) or quick")->capture_default_str();
  cmd->add_option("--params", c->params, "Burst-Gap parameters (default: xstage/data/h200_params.json)");
  cmd->add_option("--warmup", c->warmup, "Warm-up forwards per implementation")->capture_default_str();
  cmd->add_option("--iters", c->iters, "Timed forwards per implementation")->capture_default_str();
  cmd->add_option("--only", c->only, "Run only this row of the sweep (index)");
  cmd->add_option("--ep", c->ep, "Only these EP sizes, comma-separated (e.g. --ep 2)")->delimiter(',');
  cmd->add_option("--tokens", c->tokens, "Only these tokens per rank, comma-separated")->delimiter(',');
  cmd->add_option("--routing", c->routing, "Only these routings, comma-separated (uniform, skewed)")->delimiter(',');
  cmd->add_option("--budget-s", c->budget_s, "Start no new configuration after this many seconds (0: no limit)")
      ->capture_default_str();
  cmd->add_option("--compare-raster", c->compare_raster,
                  "Also time the interleaved schedule over tiles in this raster group (1: m-major; 0: no)")
      ->capture_default_str();
  cmd->add_flag("--compare-dispatch", c->compare_dispatch,
               "Also time the interleaved schedule with all of the dispatch before the tiles, a warp per row and "
               "the whole CTA per row (the other columns overlap it with the tiles)");
  cmd->add_flag("--compare-release", c->compare_release,
               "Also time the interleaved schedule with each tile released by its consumer warpgroup (the "
               "other columns release through the producer warpgroup's release agent)");
  cmd->add_flag("--profile", c->profile,
               "Also profile the interleaved kernel after the timing (a separate instantiation that reads the SM "
               "clock): each phase's share per row, in the JSON and in <png stem>_profile.png");
  cmd->add_option("--blocks", c->blocks,
                  "Persistent CTAs of the fused kernel (0: one per SM; fewer, e.g. to see whether the SMs contend "
                  "for L2 bandwidth; the schedules are still chosen for every SM)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  cmd->add_flag("--device-routing", c->device_routing,
               "Also time the forward from router logits with routing, layout and order on the GPU "
               "(FusedMoe::route_on_device) and its planner, checked bitwise against host routing");
  cmd->add_option("--json", c->json, "Results file (empty: none)")->capture_default_str();
  cmd->add_option("--png", c->png, "Speedup plot (empty: none)")->capture_default_str();
  cmd->callback([c] {
    check_outputs("bench moe", c->json, c->png);
#ifdef XSTAGE_HAVE_CUDA
    run(*c);
#else
    XS_FAIL("this xstage was built without CUDA (nvcc and NCCL >= 2.28 were not found): bench moe is unavailable");
#endif
  });
}

}  // namespace xstage::cli
