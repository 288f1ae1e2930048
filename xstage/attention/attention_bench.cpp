// `xstage bench attention` (xstage/bench/attention_bench.hpp): our kernel and the SDPA
// baselines on the same inputs, each timed with bench/timing.hpp's policy and each
// checked against the fp32 naive reference on sampled query rows, in the same loop.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cmath>
#include <ctime>
#include <optional>

#include "common/check.hpp"
#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "common/files.hpp"
#include "xstage/attention/attention_cuda.hpp"
#include "xstage/bench/attention_bench.hpp"
#include "xstage/bench/event_timer.hpp"
#include "xstage/bench/report.hpp"
#ifdef XSTAGE_HAVE_TORCH_BASELINES
#include "sdpa_baseline.hpp"
#endif

namespace xstage::attention {

namespace {

struct Shape {
  int64_t S, H, D;
  bool causal;
};

struct Measured {
  std::optional<double> ms, tflops, rel_err;
  std::string note;
  void set_ms(double t, double flops) {
    ms = t;
    tflops = flops / (t * 1e-3) * 1e-12;
  }
};

// Relative L2 error of the sampled query rows of `o` (dense [1, S, H, D] bf16) against
// the fp32 naive reference on the same rows.
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

// What every row uses: the options, device buffers for the largest configuration
// (dense [1, S, H, D]), the baselines read from a file, the input seed.
struct Bench {
  const BenchOptions& o;
  int n_check;
  DeviceBuffer<uint16_t> q, k, v, out, sdpa;
  DeviceBuffer<int> rows;
  DeviceBuffer<float> ref;
  nlohmann::json file_baselines;
  bool torch = false;
  std::string torch_version;
  uint64_t seed = 0x5eed0000ULL + static_cast<uint64_t>(std::time(nullptr));
  bench::EventTimer timer{nullptr, "attention kernel", explain_device_failure};

  static int64_t most(const BenchOptions& o, bool hd) {
    int64_t m = 0;
    for (auto S : o.seqs)
      for (auto H : o.heads)
        for (auto D : o.dims) m = std::max(m, hd ? H * D : S * H * D);
    return m;
  }
  explicit Bench(const BenchOptions& opt)
      : o(opt), n_check(std::max(opt.check_rows, 2)), q(most(opt, false)), k(most(opt, false)), v(most(opt, false)),
        out(most(opt, false)), sdpa(most(opt, false)), rows(n_check), ref(size_t(n_check * most(opt, true))) {
#ifdef XSTAGE_HAVE_TORCH_BASELINES
    torch = opt.torch;
#endif
    if (!opt.baselines_json.empty()) file_baselines = bench::read_json_file(opt.baselines_json);
  }
};

// Fresh random inputs of shape s; the output poisoned (a NaN pattern).
FwdArgs inputs(Bench& b, const Shape& s) {
  const int64_t n = s.S * s.H * s.D;
  FwdArgs a;
  a.q = Tensor4::bshd(b.q.get(), 1, s.S, s.H, s.D);
  a.k = Tensor4::bshd(b.k.get(), 1, s.S, s.H, s.D);
  a.v = Tensor4::bshd(b.v.get(), 1, s.S, s.H, s.D);
  a.o = Tensor4::bshd(b.out.get(), 1, s.S, s.H, s.D);
  a.causal = s.causal;
  fill_random_bf16(b.q.get(), n, ++b.seed, 1.f);
  fill_random_bf16(b.k.get(), n, ++b.seed, 1.f);
  fill_random_bf16(b.v.get(), n, ++b.seed, 1.f);
  fill_bf16_bits(b.out.get(), n, 0x7FC1);
  return a;
}

// The reference rows (evenly spread, first and last included) from the naive kernel.
std::vector<float> reference(Bench& b, const FwdArgs& a, std::vector<int>& rows) {
  const int64_t S = a.q.S;
  rows.resize(b.n_check);
  for (int i = 0; i < b.n_check; ++i) rows[i] = static_cast<int>((S - 1) * i / (b.n_check - 1));
  copy_to_device(b.rows.get(), rows.data(), b.n_check * sizeof(int));
  NaiveArgs na;
  na.fwd = a;
  na.rows = b.rows.get();
  na.n_rows = b.n_check;
  na.o_out = b.ref.get();
  naive_attention(na);
  XS_CHECK_CUDA(cudaDeviceSynchronize());
  return b.ref.to_host(static_cast<size_t>(b.n_check) * a.q.H * a.q.D);
}

// The SDPA backends through LibTorch, each on its own output buffer.
void time_torch(Bench& b, const FwdArgs& a, const std::vector<int>& rows, const std::vector<float>& ref, double flops,
                Measured& flash, Measured& cudnn) {
#ifdef XSTAGE_HAVE_TORCH_BASELINES
  for (auto* m : {&flash, &cudnn}) {
    FwdArgs s = a;
    s.o.data = b.sdpa.get();
    fill_bf16_bits(b.sdpa.get(), a.q.S * a.q.H * a.q.D, 0x7FC1);
    const auto r = baseline::time_sdpa(m == &flash ? "flash" : "cudnn", s, b.o.warmup, b.o.reps, b.o.budget_ms, true);
    b.torch_version = r.torch_version;
    if (!r.ok) {
      m->note = r.error;
      continue;
    }
    m->set_ms(r.median_ms, flops);
    m->rel_err = sampled_error(s.o, rows, ref);
  }
#else
  (void)b, (void)a, (void)rows, (void)ref, (void)flops, (void)flash, (void)cudnn;
#endif
}

// A baseline's time from --baselines-json, for the same shape (times only: no output to check).
void from_file(const Bench& b, const Shape& s, const char* key, double flops, Measured& m) {
  if (m.ms || b.file_baselines.is_null()) return;
  for (const auto& r : b.file_baselines.at("rows"))
    if (r.at("S") == s.S && r.at("heads") == s.H && r.at("D") == s.D && r.at("causal") == s.causal &&
        r.contains(key) && r.at(key).is_number()) {
      m.set_ms(r.at(key).get<double>(), flops);
      m.note = "from " + b.o.baselines_json;
      return;
    }
}

// Correct when our sampled error is within 2x the worst bf16 baseline's plus an atol,
// or (no baseline error known) under 2e-2.
bench::Check check(const Measured& ours, const Measured& flash, const Measured& cudnn) {
  std::optional<double> base_err;
  for (const auto* m : {&flash, &cudnn})
    if (m->rel_err) base_err = std::max(base_err.value_or(0.0), *m->rel_err);
  const double bound = base_err ? 2 * *base_err + 1e-3 : 2e-2;
  const bool ok = std::isfinite(*ours.rel_err) && *ours.rel_err <= bound;
  return {ok, fmt::format("rel err {:.2e} > {:.2e}", *ours.rel_err, bound)};
}

bench::Row to_row(const Shape& s, const Measured& ours, const Measured& flash, const Measured& cudnn,
                  const FwdConfig& cfg) {
  std::optional<double> best, ratio;
  for (const auto* m : {&flash, &cudnn})
    if (m->tflops) best = std::max(best.value_or(0.0), *m->tflops);
  if (best) ratio = *ours.tflops / *best;
  using bench::json_or_null;
  bench::Row row;
  row.check = check(ours, flash, cudnn);
  row.config = {{"S", s.S}, {"heads", s.H}, {"D", s.D}, {"causal", s.causal}};
  row.values = {{"ours_ms", json_or_null(ours.ms)}, {"ours_tflops", json_or_null(ours.tflops)},
                {"sdpa_flash_ms", json_or_null(flash.ms)}, {"sdpa_flash_tflops", json_or_null(flash.tflops)},
                {"sdpa_cudnn_ms", json_or_null(cudnn.ms)}, {"sdpa_cudnn_tflops", json_or_null(cudnn.tflops)},
                {"ratio_to_best", json_or_null(ratio)}, {"ours_rel_err", json_or_null(ours.rel_err)},
                {"sdpa_flash_rel_err", json_or_null(flash.rel_err)}, {"sdpa_cudnn_rel_err", json_or_null(cudnn.rel_err)},
                {"config", {{"block_m", cfg.block_m}, {"block_n", cfg.block_n}, {"stages", cfg.stages},
                            {"pingpong", cfg.pingpong}, {"snake", cfg.snake}, {"group_heads", cfg.tiles.group_heads}}},
                {"notes", flash.note.empty() && cudnn.note.empty()
                              ? nlohmann::json(nullptr)
                              : nlohmann::json({{"flash", flash.note}, {"cudnn", cudnn.note}})}};
  using bench::cell;
  row.cells = {(long long)s.S, (long long)s.H, (long long)s.D, std::string(s.causal ? "yes" : "no"), cell(ours.ms),
               cell(ours.tflops), cell(flash.tflops), cell(cudnn.tflops), cell(ratio), cell(ours.rel_err),
               cell(flash.rel_err), cell(cudnn.rel_err)};
  return row;
}

// One configuration: ours, then the baselines, each checked on the reference rows.
bench::Row run_row(Bench& b, const Shape& s, Measured& flash, Measured& cudnn) {
  const FwdArgs a = inputs(b, s);
  const double flops = fwd_flops(validate(a));
  std::vector<int> rows;
  const std::vector<float> ref = reference(b, a, rows);
  Measured ours;
  FwdConfig cfg;
  ours.set_ms(bench::time_median_ms(b.timer, [&] { cfg = flash_fwd(a, nullptr, b.o.kernel); }, b.o.warmup, b.o.reps,
                                    b.o.budget_ms),
              flops);
  ours.rel_err = sampled_error(a.o, rows, ref);
  if (b.torch) time_torch(b, a, rows, ref, flops, flash, cudnn);
  from_file(b, s, "sdpa_flash_ms", flops, flash);
  from_file(b, s, "sdpa_cudnn_ms", flops, cudnn);
  return to_row(s, ours, flash, cudnn, cfg);
}

bench::Table table() {
  return bench::Table({{"S", 7}, {"heads", 5}, {"D", 4}, {"causal", 6}, {"ours ms", 9, ".3f", false, true},
                       {"ours TF", 8, ".1f"}, {"flash TF", 8, ".1f"}, {"cuDNN TF", 8, ".1f"},
                       {"ratio", 7, ".3f", false, true}, {"err ours", 9, ".2e", false, true},
                       {"err flash", 9, ".2e"}, {"err cudnn", 9, ".2e"}});
}

nlohmann::json head(const cudaDeviceProp& prop, const Bench& b) {
  nlohmann::json h = bench::run_head(prop.name, 1, b.o.command);
  h.update({{"sms", prop.multiProcessorCount},
            {"batch", 1},
            {"dtype", "bf16"},
            {"tflops_formula", "4*S^2*D*heads/time, halved for causal"},
            {"timing", fmt::format("CUDA events; median over samples of back-to-back launches; warm-up {}, up to {} "
                                   "samples or {} ms per implementation",
                                   b.o.warmup, b.o.reps, b.o.budget_ms)},
            {"correctness", fmt::format("relative L2 error of {} sampled query rows (all heads) against the fp32 GPU "
                                        "naive reference",
                                        b.n_check)}});
  return h;
}

std::string baselines_text(const Bench& b) {
  if (b.torch) return "PyTorch SDPA (flash, cuDNN) through LibTorch " + b.torch_version;
  return b.o.baselines_json.empty() ? "none" : "from " + b.o.baselines_json;
}

}  // namespace

void run_bench(const BenchOptions& o) {
  XS_ASSERT(!o.seqs.empty() && !o.heads.empty() && !o.dims.empty() && !o.causal.empty(),
            "bench attention: an empty list of shapes");
  int dev = 0;
  cudaDeviceProp prop{};
  XS_ASSERT(cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess,
            "no CUDA GPU is visible: the attention bench needs one");
  XS_ASSERT(prop.major == 9, "the attention kernel needs an sm_90 (Hopper) GPU; this is {} (sm_{}{})", prop.name,
            prop.major, prop.minor);
  Bench b(o);
  const std::size_t planned = o.seqs.size() * o.heads.size() * o.dims.size() * o.causal.size();
  bench::Report report(table(), bench::ResultsFile(o.json, head(prop, b)), planned);
  fmt::print("xstage bench attention on {} ({} SMs), B = 1, bf16, times are medians of per-launch GPU time\n",
             prop.name, prop.multiProcessorCount);
  report.print_header(true);
  for (auto S : o.seqs)
    for (auto H : o.heads)
      for (auto D : o.dims)
        for (bool causal : o.causal) {
          Measured flash, cudnn;
          const bench::Row row = run_row(b, {S, H, D, causal}, flash, cudnn);
          report.set("baselines", baselines_text(b));
          report.add(row);
          for (const auto* m : {&flash, &cudnn})
            if (!m->note.empty() && !m->ms) fmt::print("          {} baseline: {}\n", m == &flash ? "flash" : "cudnn", m->note);
          std::fflush(stdout);
        }
  report.finish();
  XS_ASSERT(report.all_correct(), "some configurations produced wrong output (marked WRONG above)");
}

}  // namespace xstage::attention
