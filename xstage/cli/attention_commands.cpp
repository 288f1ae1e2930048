// `xstage bench attention`: our sm_90a attention forward kernel against PyTorch
// SDPA (flash and cuDNN backends, through LibTorch when built with
// XSTAGE_TORCH_BASELINES=ON) over a sweep of sequence lengths, head counts and
// head dims. One table row per configuration, correctness checked in the same
// loop (sampled query rows against the fp32 GPU naive reference, for ours and
// for each baseline), and a JSON results file.
#include <fmt/format.h>

#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "common/check.hpp"
#include "common/files.hpp"

#ifdef XSTAGE_HAVE_CUDA
#include <cuda_runtime.h>

#include "xstage/attention_cuda.hpp"
#include "xstage/attention_timing.hpp"
#include "xstage/bench_timing.hpp"
#include "xstage/check_cuda.hpp"
#include "xstage/device_buffer.hpp"
#ifdef XSTAGE_HAVE_TORCH_BASELINES
#include "sdpa_baseline.hpp"
#endif
#endif

namespace xstage::cli {

namespace {

struct BenchCli {
  std::string seqs = "1K,4K,16K,32K,64K,128K";
  std::string heads = "24,6,40,10";
  std::string dims = "64,128";
  std::string causal = "both";
  int warmup = 1;
  int reps = 10;
  double budget_ms = 300;
  int check_rows = 64;
  std::string baselines = "auto";
  std::string baselines_json;
  std::string json = "docs/results/attention.json";
  std::string pingpong = "auto";
  std::string snake = "auto";
  std::string head_group = "heuristic";
};

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

#ifdef XSTAGE_HAVE_CUDA

using namespace xstage::attention;

struct Measured {
  std::optional<double> ms, tflops, rel_err;
  std::string note;
};

// Median per-launch time: each sample is `inner` back-to-back launches between
// two events (inner from the warm-up, so a sample lasts >= 2 ms).
// Relative L2 error of the sampled query rows of `o` (dense [1, S, H, D] bf16)
// against the fp32 naive reference on the same rows.
double sampled_error(const Tensor4& o, const std::vector<int>& rows, const std::vector<float>& ref) {
  const int64_t HD = o.H * o.D;
  std::vector<uint16_t> got(rows.size() * HD);
  for (size_t r = 0; r < rows.size(); ++r)
    XS_CHECK_CUDA(cudaMemcpy(got.data() + r * HD, static_cast<const uint16_t*>(o.data) + rows[r] * o.stride_s, HD * 2,
                             cudaMemcpyDeviceToHost));
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double x = bf16_bits_to_float(got[i]);
    if (!std::isfinite(x)) return INFINITY;
    num += (x - ref[i]) * (x - ref[i]);
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

nlohmann::json opt_json(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); }
std::string opt_str(const std::optional<double>& v, const char* f = "{:.1f}") {
  return v ? fmt::format(fmt::runtime(f), *v) : std::string("-");
}

void run_bench(const BenchCli& c) {
  const auto seqs = parse_list(c.seqs, "--seq");
  const auto heads = parse_list(c.heads, "--heads");
  const auto dims = parse_list(c.dims, "--dims");
  std::vector<bool> causals;
  if (c.causal == "both") causals = {false, true};
  else if (c.causal == "on") causals = {true};
  else if (c.causal == "off") causals = {false};
  else XS_FAIL("--causal '{}': use both, on or off", c.causal);
  XS_ASSERT(c.baselines == "auto" || c.baselines == "off", "--baselines '{}': use auto or off", c.baselines);
  FwdOptions opt;
  if (c.pingpong == "on") opt.pingpong = 1;
  else if (c.pingpong == "off") opt.pingpong = 0;
  else XS_ASSERT(c.pingpong == "auto", "--pingpong '{}': use auto, on or off", c.pingpong);
  if (c.snake == "on") opt.snake = 1;
  else if (c.snake == "off") opt.snake = 0;
  else XS_ASSERT(c.snake == "auto", "--snake '{}': use auto, on or off", c.snake);
  if (c.head_group == "all") opt.head_group = 0;
  else if (c.head_group == "auto") opt.head_group = -2;
  else if (c.head_group != "heuristic") opt.head_group = static_cast<int>(parse_list(c.head_group, "--head-group").at(0));

  int dev = 0;
  cudaDeviceProp prop{};
  XS_ASSERT(cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess,
            "no CUDA GPU is visible: the attention bench needs one");
  XS_ASSERT(prop.major == 9, "the attention kernel needs an sm_90 (Hopper) GPU; this is {} (sm_{}{})", prop.name,
            prop.major, prop.minor);

  bool torch_baselines = false;
#ifdef XSTAGE_HAVE_TORCH_BASELINES
  torch_baselines = c.baselines == "auto";
#endif
  nlohmann::json file_baselines;
  if (!c.baselines_json.empty()) {
    std::ifstream in(c.baselines_json);
    XS_ASSERT(in.good(), "cannot read --baselines-json {}", c.baselines_json);
    file_baselines = nlohmann::json::parse(in);
  }

  // Buffers for the largest configuration, shared by all rows (dense [1, S, H, D]).
  int64_t max_elems = 0, max_hd = 0;
  for (auto S : seqs)
    for (auto H : heads)
      for (auto D : dims) max_elems = std::max(max_elems, S * H * D), max_hd = std::max(max_hd, H * D);
  DeviceBuffer<uint16_t> dq(max_elems), dk(max_elems), dv(max_elems), dout(max_elems), dsdpa(max_elems);
  const int n_check = std::max(c.check_rows, 2);
  DeviceBuffer<int> drows(n_check);
  DeviceBuffer<float> dref(static_cast<size_t>(n_check * max_hd));

  fmt::print("xstage bench attention on {} ({} SMs), B = 1, bf16, times are medians of per-launch GPU time\n", prop.name,
             prop.multiProcessorCount);
  const std::string header = fmt::format("{:>7} {:>5} {:>4} {:>6} | {:>9} {:>8} {:>8} {:>8} | {:>7} | {:>9} {:>9} {:>9}",
                                         "S", "heads", "D", "causal", "ours ms", "ours TF", "flash TF", "cuDNN TF",
                                         "ratio", "err ours", "err flash", "err cudnn");
  fmt::print("{}\n{}\n", header, std::string(header.size(), '-'));

  nlohmann::json rows = nlohmann::json::array();
  bool all_ok = true;
  uint64_t seed = 0x5eed0000ULL + static_cast<uint64_t>(std::time(nullptr));
  std::string torch_version;
  // Rewritten after every row, so a run cut short still leaves its rows.
  auto write_json = [&] {
    nlohmann::json out = {
        {"card", prop.name},
        {"gpus", 1},
        {"sms", prop.multiProcessorCount},
        {"date", today_utc()},
        {"command", command_line()},
        {"batch", 1},
        {"dtype", "bf16"},
        {"tflops_formula", "4*S^2*D*heads/time, halved for causal"},
        {"timing", fmt::format("CUDA events; median over samples of back-to-back launches; warm-up {}, up to {} samples "
                               "or {} ms per implementation",
                               c.warmup, c.reps, c.budget_ms)},
        {"correctness", fmt::format("relative L2 error of {} sampled query rows (all heads) against the fp32 GPU naive "
                                    "reference",
                                    n_check)},
        {"baselines", torch_baselines ? "PyTorch SDPA (flash, cuDNN) through LibTorch " + torch_version
                                      : (c.baselines_json.empty() ? "none" : "from " + c.baselines_json)},
        {"rows", rows}};
    common::write_file_atomic(c.json, out.dump(2) + "\n");
  };
  for (auto S : seqs)
    for (auto H : heads)
      for (auto D : dims)
        for (bool causal : causals) {
          const int64_t n = S * H * D;
          FwdArgs a;
          a.q = Tensor4::bshd(dq.get(), 1, S, H, D);
          a.k = Tensor4::bshd(dk.get(), 1, S, H, D);
          a.v = Tensor4::bshd(dv.get(), 1, S, H, D);
          a.o = Tensor4::bshd(dout.get(), 1, S, H, D);
          a.causal = causal;
          fill_random_bf16(dq.get(), n, ++seed, 1.f);
          fill_random_bf16(dk.get(), n, ++seed, 1.f);
          fill_random_bf16(dv.get(), n, ++seed, 1.f);
          fill_bf16_bits(dout.get(), n, 0x7FC1);
          const Problem prob = validate(a);
          const double flops = fwd_flops(prob);

          // Reference rows: evenly spread, first and last included.
          std::vector<int> rows_h(n_check);
          for (int i = 0; i < n_check; ++i) rows_h[i] = static_cast<int>((S - 1) * i / (n_check - 1));
          copy_to_device(drows.get(), rows_h.data(), n_check * sizeof(int));
          NaiveArgs na;
          na.fwd = a;
          na.rows = drows.get();
          na.n_rows = n_check;
          na.o_out = dref.get();
          naive_attention(na);
          XS_CHECK_CUDA(cudaDeviceSynchronize());
          const auto ref = dref.to_host(static_cast<size_t>(n_check) * H * D);

          Measured ours, flash, cudnn;
          FwdConfig cfg;
          ours.ms = time_median_ms([&] { cfg = flash_fwd(a, nullptr, opt); }, c.warmup, c.reps, c.budget_ms);
          ours.tflops = flops / (*ours.ms * 1e-3) * 1e-12;
          ours.rel_err = sampled_error(a.o, rows_h, ref);

          auto from_file = [&](const char* key) -> std::optional<double> {
            if (file_baselines.is_null()) return std::nullopt;
            for (const auto& r : file_baselines.at("rows"))
              if (r.at("S") == S && r.at("heads") == H && r.at("D") == D && r.at("causal") == causal &&
                  r.contains(key) && r.at(key).is_number())
                return r.at(key).get<double>();
            return std::nullopt;
          };
#ifdef XSTAGE_HAVE_TORCH_BASELINES
          if (torch_baselines) {
            for (auto* m : {&flash, &cudnn}) {
              const std::string backend = m == &flash ? "flash" : "cudnn";
              FwdArgs b = a;
              b.o = Tensor4::bshd(dsdpa.get(), 1, S, H, D);
              fill_bf16_bits(dsdpa.get(), n, 0x7FC1);
              const auto r = baseline::time_sdpa(backend, b, c.warmup, c.reps, c.budget_ms, true);
              torch_version = r.torch_version;
              if (r.ok) {
                m->ms = r.median_ms;
                m->tflops = flops / (r.median_ms * 1e-3) * 1e-12;
                m->rel_err = sampled_error(b.o, rows_h, ref);
              } else {
                m->note = r.error;
              }
            }
          }
#endif
          if (!flash.ms) {
            if (auto ms = from_file("sdpa_flash_ms")) flash.ms = ms, flash.tflops = flops / (*ms * 1e-3) * 1e-12, flash.note = "from " + c.baselines_json;
          }
          if (!cudnn.ms) {
            if (auto ms = from_file("sdpa_cudnn_ms")) cudnn.ms = ms, cudnn.tflops = flops / (*ms * 1e-3) * 1e-12, cudnn.note = "from " + c.baselines_json;
          }
          std::optional<double> best;
          for (const auto* m : {&flash, &cudnn})
            if (m->tflops) best = std::max(best.value_or(0.0), *m->tflops);
          std::optional<double> ratio;
          if (best) ratio = *ours.tflops / *best;
          // Correct when our sampled error is within 2x the worst bf16 baseline's plus
          // an atol, or (no baseline error known) under 2e-2.
          std::optional<double> base_err;
          for (const auto* m : {&flash, &cudnn})
            if (m->rel_err) base_err = std::max(base_err.value_or(0.0), *m->rel_err);
          const bool ok = std::isfinite(*ours.rel_err) && *ours.rel_err <= (base_err ? 2 * *base_err + 1e-3 : 2e-2);
          all_ok = all_ok && ok;

          fmt::print("{:>7} {:>5} {:>4} {:>6} | {:>9.3f} {:>8.1f} {:>8} {:>8} | {:>7} | {:>9.2e} {:>9} {:>9}{}\n", S, H, D,
                     causal ? "yes" : "no", *ours.ms, *ours.tflops, opt_str(flash.tflops), opt_str(cudnn.tflops),
                     opt_str(ratio, "{:.3f}"), *ours.rel_err, opt_str(flash.rel_err, "{:.2e}"),
                     opt_str(cudnn.rel_err, "{:.2e}"), ok ? "" : "  WRONG");
          for (const auto* m : {&flash, &cudnn})
            if (!m->note.empty() && !m->ms) fmt::print("          {} baseline: {}\n", m == &flash ? "flash" : "cudnn", m->note);
          std::fflush(stdout);

          rows.push_back({{"S", S},
                          {"heads", H},
                          {"D", D},
                          {"causal", causal},
                          {"ours_ms", opt_json(ours.ms)},
                          {"ours_tflops", opt_json(ours.tflops)},
                          {"sdpa_flash_ms", opt_json(flash.ms)},
                          {"sdpa_flash_tflops", opt_json(flash.tflops)},
                          {"sdpa_cudnn_ms", opt_json(cudnn.ms)},
                          {"sdpa_cudnn_tflops", opt_json(cudnn.tflops)},
                          {"ratio_to_best", opt_json(ratio)},
                          {"ours_rel_err", opt_json(ours.rel_err)},
                          {"sdpa_flash_rel_err", opt_json(flash.rel_err)},
                          {"sdpa_cudnn_rel_err", opt_json(cudnn.rel_err)},
                          {"correct", ok},
                          {"config", {{"block_m", cfg.block_m}, {"block_n", cfg.block_n}, {"stages", cfg.stages},
                                      {"pingpong", cfg.pingpong}, {"snake", cfg.snake},
                                      {"group_heads", cfg.tiles.group_heads}}},
                          {"notes", flash.note.empty() && cudnn.note.empty()
                                        ? nlohmann::json(nullptr)
                                        : nlohmann::json({{"flash", flash.note}, {"cudnn", cudnn.note}})}});
          write_json();
        }

  fmt::print("wrote {}\n", c.json);
  XS_ASSERT(all_ok, "some configurations produced wrong output (marked WRONG above)");
}

#endif  // XSTAGE_HAVE_CUDA

}  // namespace

void add_attention_commands(CLI::App& app) {
  auto* bench = bench_group(app);
  try {
    bench->get_subcommand("attention");
    return;  // already registered (idempotent)
  } catch (const CLI::OptionNotFound&) {
  }
  auto* cmd = bench->add_subcommand("attention", "Attention forward: our sm_90a kernel vs PyTorch SDPA (flash, cuDNN)");
  auto c = std::make_shared<BenchCli>();
  cmd->add_option("--seq", c->seqs, "Sequence lengths (Sq = Skv), K = 1024")->capture_default_str();
  cmd->add_option("--heads", c->heads, "Head counts per GPU")->capture_default_str();
  cmd->add_option("--dims", c->dims, "Head dims (64, 128)")->capture_default_str();
  cmd->add_option("--causal", c->causal, "both, on or off")->capture_default_str();
  cmd->add_option("--warmup", c->warmup, "Warm-up launches per implementation")->capture_default_str();
  cmd->add_option("--reps", c->reps, "Timed samples per implementation (at most)")->capture_default_str();
  cmd->add_option("--budget-ms", c->budget_ms, "GPU time per implementation and row after 3 samples")->capture_default_str();
  cmd->add_option("--check-rows", c->check_rows, "Query rows checked against the naive reference")->capture_default_str();
  cmd->add_option("--baselines", c->baselines, "auto (LibTorch SDPA when built in) or off")->capture_default_str();
  cmd->add_option("--baselines-json", c->baselines_json,
                  "Take SDPA times (sdpa_flash_ms, sdpa_cudnn_ms per row) from this JSON when LibTorch is not built in");
  cmd->add_option("--json", c->json, "Results file")->capture_default_str();
  cmd->add_option("--pingpong", c->pingpong, "Consumer warpgroups take turns: auto (heuristic), on, off")
      ->capture_default_str();
  cmd->add_option("--snake", c->snake, "Boustrophedon scheduler rounds: auto (heuristic), on, off")
      ->capture_default_str();
  cmd->add_option("--head-group", c->head_group,
                  "Causal heads per longest-first section: heuristic, all, auto (~8 grid rounds), or a number")
      ->capture_default_str();
  cmd->callback([c] {
    check_outputs("bench attention", c->json);
#ifdef XSTAGE_HAVE_CUDA
    run_bench(*c);
#else
    (void)c;
    XS_FAIL("this xstage was built without CUDA: bench attention needs an sm_90 GPU build");
#endif
  });
}

}  // namespace xstage::cli
