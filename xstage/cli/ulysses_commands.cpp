// `xstage bench ulysses`: Ulysses SP attention, the fused post-attention All-to-All
// against the serial, coarse-overlap and PyTorch-like serial paths (or, --kernel-only,
// one rank's share on one GPU); and `xstage bench qkv`: the fused QKV projection +
// pre-attention All-to-All against cuBLAS + qk_norm_rope on one GPU. The sweeps are
// the library's (xstage/ulysses/ulysses_bench_sweep.cpp, qkv_bench_sweep.cpp).
#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "commands.hpp"
#include "common/check.hpp"
#include "common/validate.hpp"
#include "xstage/bench/qkv_bench.hpp"
#include "xstage/bench/ulysses_bench.hpp"

namespace xstage::cli {

namespace {

namespace v = common::validate;

// What the sweep's options must agree on once parsed (each one alone is checked by its
// validator): distinct P values, S bounds that are powers of two in order, and a timed
// rank that exists for the largest P.
void check_sweep(const ulysses::SweepOptions& o) {
  unique_items(o.ranks, "--ranks");
  auto refuse = [](const std::string& why) { throw common::Error(why); };
  for (const auto& [s, what] : {std::pair{o.min_seq, "--min-seq"}, std::pair{o.max_seq, "--max-seq"}})
    if ((s & (s - 1)) != 0) refuse(fmt::format("{}: {} tokens is not a power of two", what, s));
  if (o.min_seq > o.max_seq) refuse(fmt::format("--min-seq {} is above --max-seq {}", o.min_seq, o.max_seq));
  const int largest = *std::max_element(o.ranks.begin(), o.ranks.end());
  if (o.rank >= largest)
    refuse(fmt::format("--rank {} does not exist for the largest P = {} (ranks 0 .. {})", o.rank, largest, largest - 1));
}

void add_ulysses_bench(CLI::App* bench) {
  auto* cmd = bench->add_subcommand("ulysses", "Ulysses SP attention: fused post-attention All-to-All vs serial, "
                                               "coarse overlap and PyTorch-like serial");
  auto o = std::make_shared<ulysses::SweepOptions>();
  auto torch = std::make_shared<std::string>("auto");
  cmd->add_option("--ranks", o->ranks, "P values, comma-separated (those above the visible GPUs are skipped with a note)")
      ->delimiter(',')->check(v::min(1, "ranks"))->capture_default_str();
  cmd->add_option("--min-seq", o->min_seq, "Smallest S of the sweep (4096 .. 131072, powers of two)")
      ->check(v::range(4096, 131072, "tokens"))->capture_default_str();
  cmd->add_option("--max-seq", o->max_seq, "Largest S of the sweep")->check(v::range(4096, 131072, "tokens"))
      ->capture_default_str();
  add_params_option(cmd, o->params);
  cmd->add_option("--warmup", o->warmup, "Warm-up launches per path")->check(v::min(0, "launches"))
      ->capture_default_str();
  cmd->add_option("--samples", o->samples, "Timed samples per path (median)")->check(v::min(1, "samples"))
      ->capture_default_str();
  cmd->add_option("--torch", *torch, "auto: LibTorch SDPA baseline when built in; off")
      ->check(CLI::IsMember({"auto", "off"}))->capture_default_str();
  add_output_options(cmd, o->json, &o->png, "Speedup plot (empty: none)");
  cmd->add_flag("--kernel-only", o->kernel_only,
                "One GPU, no NCCL: attention alone, in the fused order, and the fused kernel with all targets local "
                "(its own cost), for one rank's share; JSON to --json (default: none)");
  cmd->add_option("--link", o->link,
                  "nvlink: P GPUs over NCCL; host: one GPU, rank --rank's share with its rows for the other P - 1 "
                  "owners crossing the host link (mapped pinned host memory): the advisor's schedule (SM stores in "
                  "its tile order, or a copy-engine drain) against SM stores in row-major order and the exchange "
                  "after attention, with the host-link fit's predictions; JSON to --json (default: none)")
      ->check(CLI::IsMember({"nvlink", "host"}))->capture_default_str();
  cmd->add_option("--rank", o->rank, "--kernel-only and --link host: the rank whose share and order are timed")
      ->check(v::min(0, "rank"))->capture_default_str();
  auto* json = cmd->get_option("--json");
  cmd->callback([o, torch, json] {
    check_outputs("bench ulysses", o->json, o->png);
    check_sweep(*o);
    if (o->link == "host" && o->kernel_only)
      throw common::Error("bench ulysses: --link host and --kernel-only exclude each other");
    if (o->link == "host" && !o->png.empty())
      throw common::Error("bench ulysses --link host: no --png; `xstage host-link-results --png-dir` draws its plot");
    o->torch = *torch == "auto";
    o->command = command_line();
    // --kernel-only and --link host write JSON only when asked.
    if ((o->kernel_only || o->link == "host") && json->count() == 0) o->json.clear();
    needs_gpu("bench ulysses");
    if constexpr (kHaveCuda) {
      if (o->link == "host") ulysses::run_host_link_sweep(*o);
      else if (o->kernel_only) ulysses::run_kernel_sweep(*o);
      else ulysses::run_sweep(*o);
    }
  });
}

void add_qkv_bench(CLI::App* bench) {
  auto* cmd = bench->add_subcommand(
      "qkv", "The QKV projection with the pre-attention All-to-All fused in, on one GPU, against cuBLAS + "
             "qk_norm_rope (D = 128)");
  auto o = std::make_shared<ulysses::QkvSweepOptions>();
  cmd->add_option("--seq", o->seqs, "Full sequence lengths S")->delimiter(',')->check(v::min(1, "tokens"))
      ->capture_default_str();
  cmd->add_option("--ranks", o->ranks, "Ranks P whose share is timed")->delimiter(',')->check(v::min(1, "ranks"))
      ->capture_default_str();
  cmd->add_option("--heads", o->heads, "Heads H (C = 128 H)")->delimiter(',')->check(v::min(1, "heads"))
      ->capture_default_str();
  cmd->add_option("--rank", o->rank, "Whose share and tile order")->check(v::min(0, "rank"))->capture_default_str();
  cmd->add_option("--groups", o->groups,
                  "Raster groups (m blocks) of the fused orders timed, comma-separated; the first is the "
                  "headline, 0 = the L2 rule")
      ->delimiter(',')->check(v::min(0, "m blocks", "0: the L2 rule"))->capture_default_str();
  cmd->add_option("--warmup", o->warmup, "Warm-up launches per variant")->check(v::min(0, "launches"))
      ->capture_default_str();
  cmd->add_option("--samples", o->samples, "Timed samples per variant (median)")->check(v::min(1, "samples"))
      ->capture_default_str();
  cmd->add_option("--count-checks", o->count_checks,
                  "Launches per release mode and order whose completion counters are checked")
      ->check(CLI::Range(1, 100000))->capture_default_str();
  cmd->add_option("--link", o->link,
                  "nvlink: every owner local (loopback); host: also the other owners' q, k, v in mapped pinned host "
                  "memory, checked bitwise against HBM, timed and predicted with the host-link fit")
      ->check(CLI::IsMember({"nvlink", "host"}))->capture_default_str();
  add_params_option(cmd, o->params);
  add_output_options(cmd, o->json);
  cmd->callback([o] {
    check_outputs("bench qkv", o->json);
    unique_items(o->seqs, "--seq");
    unique_items(o->ranks, "--ranks");
    unique_items(o->heads, "--heads");
    unique_items(o->groups, "--groups");
    o->command = command_line();
    needs_gpu("bench qkv");
    if constexpr (kHaveCuda) ulysses::run_qkv_sweep(*o);
  });
}

}  // namespace

void add_ulysses_commands(CLI::App& app) {
  add_ulysses_bench(bench_group(app));
  add_qkv_bench(bench_group(app));
}

}  // namespace xstage::cli
