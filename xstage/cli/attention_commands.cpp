// `xstage bench attention`: our sm_90a attention forward kernel against PyTorch SDPA
// (attention::run_bench, xstage/attention/attention_bench.cpp). Lists such as
// "1K,4K" and the kernel's auto/on/off switches are parsed here.
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "common/check.hpp"
#include "common/validate.hpp"
#include "xstage/bench/attention_bench.hpp"

namespace xstage::cli {

namespace {

namespace v = common::validate;

struct AttentionCli {
  std::string seqs = "1K,4K,16K,32K,64K,128K", heads = "24,6,40,10", dims = "64,128";
  std::string causal = "both", baselines = "auto";
  std::string pingpong = "auto", snake = "auto", head_group = "heuristic";
  attention::BenchOptions bench;
};

// "1K,4K" or "24,6": positive integers, K = 1024.
std::vector<int64_t> parse_list(const std::string& s, const char* what) {
  std::vector<int64_t> out;
  size_t start = 0;
  while (start < s.size()) {
    const size_t comma = s.find(',', start);
    std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    int64_t mult = 1;
    if (!item.empty() && (item.back() == 'K' || item.back() == 'k')) mult = 1024, item.pop_back();
    try {
      size_t used = 0;
      const long long v = std::stoll(item, &used);
      XS_ASSERT(used == item.size() && v > 0, "{}: '{}' is not a positive integer", what, item);
      out.push_back(v * mult);
    } catch (const std::logic_error&) {
      XS_FAIL("{}: '{}' is not a number (use e.g. 1K,4K or 24,6)", what, item);
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  XS_ASSERT(!out.empty(), "{}: empty list", what);
  return out;
}

// auto: -1 (the heuristic), on: 1, off: 0.
int switch_value(const std::string& v) { return v == "auto" ? -1 : v == "on" ? 1 : 0; }

attention::BenchOptions to_options(const AttentionCli& c) {
  attention::BenchOptions o = c.bench;
  o.seqs = parse_list(c.seqs, "--seq");
  o.heads = parse_list(c.heads, "--heads");
  o.dims = parse_list(c.dims, "--dims");
  for (const int64_t d : o.dims)
    if (d != 64 && d != 128) throw common::Error(fmt::format("--dims: {} is not a supported head dim (64, 128)", d));
  // A repeated item would time the same rows twice and write them twice.
  unique_items(o.seqs, "--seq");
  unique_items(o.heads, "--heads");
  unique_items(o.dims, "--dims");
  o.causal = c.causal == "both" ? std::vector<bool>{false, true} : std::vector<bool>{c.causal == "on"};
  o.torch = c.baselines == "auto";
  o.kernel.pingpong = switch_value(c.pingpong);
  o.kernel.snake = switch_value(c.snake);
  if (c.head_group == "all") o.kernel.head_group = 0;
  else if (c.head_group == "auto") o.kernel.head_group = -2;
  else if (c.head_group != "heuristic")
    o.kernel.head_group = static_cast<int>(parse_list(c.head_group, "--head-group").at(0));
  o.command = command_line();
  return o;
}

}  // namespace

void add_attention_commands(CLI::App& app) {
  auto* cmd = bench_group(app)->add_subcommand("attention",
                                               "Attention forward: our sm_90a kernel vs PyTorch SDPA (flash, cuDNN)");
  auto c = std::make_shared<AttentionCli>();
  const auto on_off = CLI::IsMember({"auto", "on", "off"});
  cmd->add_option("--seq", c->seqs, "Sequence lengths (Sq = Skv), K = 1024")->capture_default_str();
  cmd->add_option("--heads", c->heads, "Head counts per GPU")->capture_default_str();
  cmd->add_option("--dims", c->dims, "Head dims (64, 128)")->capture_default_str();
  cmd->add_option("--causal", c->causal, "both, on or off")->check(CLI::IsMember({"both", "on", "off"}))
      ->capture_default_str();
  cmd->add_option("--warmup", c->bench.warmup, "Warm-up launches per implementation")
      ->check(v::min(0, "launches"))->capture_default_str();
  cmd->add_option("--reps", c->bench.reps, "Timed samples per implementation (at most)")
      ->check(v::min(1, "samples"))->capture_default_str();
  cmd->add_option("--budget-ms", c->bench.budget_ms, "GPU time per implementation and row after 3 samples")
      ->check(v::min(0, "ms"))->capture_default_str();
  cmd->add_option("--check-rows", c->bench.check_rows, "Query rows checked against the naive reference")
      ->check(v::min(0, "rows"))->capture_default_str();
  cmd->add_option("--baselines", c->baselines, "auto (LibTorch SDPA when built in) or off")
      ->check(CLI::IsMember({"auto", "off"}))->capture_default_str();
  cmd->add_option("--baselines-json", c->bench.baselines_json,
                  "Take SDPA times (sdpa_flash_ms, sdpa_cudnn_ms per row) from this JSON when LibTorch is not built in")
      ->check(v::readable_file());
  add_output_options(cmd, c->bench.json);
  cmd->add_option("--pingpong", c->pingpong, "Consumer warpgroups take turns: auto (heuristic), on, off")
      ->check(on_off)->capture_default_str();
  cmd->add_option("--snake", c->snake, "Boustrophedon scheduler rounds: auto (heuristic), on, off")
      ->check(on_off)->capture_default_str();
  cmd->add_option("--head-group", c->head_group,
                  "Causal heads per longest-first section: heuristic, all, auto (~8 grid rounds), or a number")
      ->capture_default_str();
  cmd->callback([c] {
    check_outputs("bench attention", c->bench.json);
    const attention::BenchOptions o = to_options(*c);
    needs_gpu("bench attention");
    if constexpr (kHaveCuda) attention::run_bench(o);
  });
}

}  // namespace xstage::cli
