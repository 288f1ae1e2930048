// `xstage bench moe`: the fused EP MoE (both schedules) against the unfused NCCL +
// cuBLAS path over a sweep (moe::run_sweep, xstage/moe/moe_bench_sweep.cpp).
#include <memory>

#include "commands.hpp"
#include "common/check.hpp"
#include "common/validate.hpp"
#include "xstage/bench/moe_bench.hpp"

namespace xstage::cli {

namespace v = common::validate;

void add_moe_commands(CLI::App& app) {
  auto* cmd = bench_group(app)->add_subcommand(
      "moe", "Fused EP MoE (Expert-Wave, Interleaved) vs the unfused NCCL+cuBLAS path");
  auto o = std::make_shared<moe::SweepOptions>();
  cmd->add_option("--sweep", o->sweep,
                  "standard (192 configurations, EP 2 and 4), eight or one (the same 96 at EP 8 or 1) or quick")
      ->check(CLI::IsMember({"standard", "eight", "one", "quick"}))->capture_default_str();
  add_params_option(cmd, o->params);
  cmd->add_option("--warmup", o->bench.warmup, "Warm-up forwards per implementation")
      ->check(v::min(0, "forwards"))->capture_default_str();
  cmd->add_option("--iters", o->bench.iters, "Timed forwards per implementation")->check(v::min(1, "forwards"))
      ->capture_default_str();
  // -1 in the library means "every row"; a typed value is a row index.
  cmd->add_option("--only", o->filter.only, "Run only this row of the sweep (index)")->check(v::min(0, "row"));
  cmd->add_option("--ep", o->filter.ep, "Only these EP sizes, comma-separated (e.g. --ep 2)")->delimiter(',')
      ->check(v::min(1, "ranks"));
  cmd->add_option("--tokens", o->filter.tokens, "Only these tokens per rank, comma-separated")->delimiter(',')
      ->check(v::min(1, "tokens"));
  cmd->add_option("--routing", o->filter.routing,
                  "Only these routings, comma-separated (uniform, skewed; balanced: every expert the mean count, "
                  "not in the default sweeps)")
      ->delimiter(',')->check(CLI::IsMember({"uniform", "skewed", "balanced"}));
  cmd->add_option("--budget-s", o->budget_s, "Start no new configuration after this many seconds (0: no limit)")
      ->check(v::min(0, "s", "0: no limit"))
      ->capture_default_str();
  cmd->add_option("--blocks", o->bench.blocks,
                  "Persistent CTAs of the fused kernel (0: one per SM; fewer, e.g. to see whether the SMs contend "
                  "for L2 bandwidth; the schedules are still chosen for every SM)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  cmd->add_flag("--device-routing", o->bench.device_routing,
                "Also time the forward from router logits with routing, layout and order on the GPU "
                "(FusedMoe::route_on_device) and its planner, checked bitwise against host routing");
  cmd->add_flag("--profile", o->bench.profile,
                "Also record where the kernel's time goes: the Interleaved order (with --link host: both orders, "
                "rank 0) in profiled launches after the timing (clock64 phase sums per CTA), as shares in each "
                "row's JSON");
  cmd->add_option("--link", o->link,
                  "nvlink: EP GPUs over NCCL; host: one GPU, the EP ranks at once with every rank's combine rows "
                  "in mapped pinned host memory (the combine over the host link), Expert-Wave against the "
                  "advisor's Interleaved, each with SM stores and with the copy-engine combine drain, and the "
                  "host-link fit's predictions (no unfused baseline)")
      ->check(CLI::IsMember({"nvlink", "host"}))->capture_default_str();
  cmd->add_flag("--predict-only", o->predict_only,
                "With --link host: the model's predictions for every selected row (compute, both schedules' "
                "stalls, Interleaved over Expert-Wave, the advisor's Interleaved), on the host without a GPU");
  cmd->add_option("--sms", o->sms, "With --predict-only: the GPU's SM count")->check(CLI::Range(1, 1024))
      ->capture_default_str();
  add_output_options(cmd, o->json, &o->png,
                     "Chart (empty: none): Interleaved / Expert-Wave per row; with --sweep one a heatmap of fused "
                     "over cuBLAS by shape and tokens");
  auto* json = cmd->get_option("--json");
  cmd->callback([o, json] {
    if (o->link == "host" && json->count() == 0) o->json.clear();  // --link host: JSON only when asked
    check_outputs("bench moe", o->json, o->png);
    if (o->link == "host" && !o->png.empty())
      throw common::Error("bench moe --link host: no --png; `xstage host-link-results --png-dir` draws its plot");
    unique_items(o->filter.ep, "--ep");
    unique_items(o->filter.tokens, "--tokens");
    unique_items(o->filter.routing, "--routing");
    o->command = command_line();
    if (o->predict_only) {
      if (o->link != "host") throw common::Error("bench moe: --predict-only needs --link host");
      moe::predict_host_link_sweep(*o);
      return;
    }
    needs_gpu("bench moe");
    if constexpr (kHaveCuda) o->link == "host" ? moe::run_host_link_sweep(*o) : moe::run_sweep(*o);
  });
}

}  // namespace xstage::cli
