// The Burst-Gap commands of the `xstage` CLI (host only):
//   fit      sweep.csv -o params.json [--holdout 0.3 --seed S] [--report report.json]
//   predict  --params params.json --sms 132 --burst 16KiB --gap 2us [--bursts N] [--json]
//   plot     sweep.csv --out DIR [--params params.json] [--pattern --store --sms --gpus]
//   demo     --data DIR --out OUTDIR [--sweep FILE] [--live]
//   synth    -o sweep.csv   (a model-generated sweep for dry runs; never a measurement)
// Every problem becomes a common::Error, which main() prints as one line.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

#include "commands.hpp"
#include "common/check.hpp"
#include "common/files.hpp"
#include "common/plot.hpp"
#include "common/validate.hpp"
#include "xstage/burstgap/burstgap.hpp"
#include "xstage/probe/sweep.hpp"

namespace xstage::cli {

namespace {

namespace bg = xstage::burstgap;
namespace fs = std::filesystem;
namespace v = common::validate;

constexpr const char* kSyntheticMark = "# SYNTHETIC";

void out(const std::string& s) { std::fputs(s.c_str(), stdout); }

bool is_synthetic(const fs::path& csv) {
  std::ifstream in(csv);
  std::string first;
  std::getline(in, first);
  return first.rfind(kSyntheticMark, 0) == 0;
}

std::vector<SweepRow> read_sweep(const fs::path& path) {
  v::file(path, "sweep");
  auto rows = read_sweep_csv(path);
  if (is_synthetic(path))
    out(fmt::format("note: {} is a SYNTHETIC sweep generated from the model, not a measurement\n", path.string()));
  return rows;
}

// Picks the group for plots and examples: the requested one, else peer/st16, else the first.
bg::FitTarget parse_target(const std::string& s) {
  if (s == "mean") return bg::FitTarget::mean;
  if (s == "median") return bg::FitTarget::median;
  XS_FAIL("--target: '{}' is not mean or median", s);
}

const bg::ModelParams& example_group(const bg::Params& params) {
  for (const auto& g : params.groups)
    if (g.pattern == "peer" && g.store == "st16") return g;
  return params.groups.front();
}

// ---------------------------------------------------------------- fit

struct FitArgs {
  std::string sweep, out, report, target = "mean";
  double holdout = 0;
  std::uint64_t seed = 1;
  std::size_t max_rows = 40;
};

bg::FitResult fit_and_report(const std::vector<SweepRow>& rows, const std::string& source, bg::FitTarget target,
                             double holdout, std::uint64_t seed, std::size_t max_rows) {
  bg::FitOptions opt;
  opt.target = target;
  opt.holdout = holdout;
  opt.seed = seed;
  auto res = bg::fit_sweep(rows, opt, source);
  std::size_t issue = 0;
  for (const auto& r : rows) issue += r.mode == "issue";
  out(fmt::format("fitted {} group{} from {} ({} issue rows{}; target {})\n\n", res.params.groups.size(),
                  res.params.groups.size() == 1 ? "" : "s", source, issue,
                  holdout > 0 ? fmt::format(", {} held out", res.held_out.size()) : "", bg::to_string(target)));
  out(bg::format_params(res.params));
  out("\n" + bg::format_fit_report(res, max_rows));
  return res;
}

void run_fit(const FitArgs& a) {
  const auto rows = read_sweep(a.sweep);
  const auto res = fit_and_report(rows, a.sweep, parse_target(a.target), a.holdout, a.seed, a.max_rows);
  bg::write_params(res.params, a.out);
  out(fmt::format("\nwrote {}\n", a.out));
  if (!a.report.empty()) {
    common::write_file_atomic(a.report, bg::report_to_json(res));
    out(fmt::format("wrote {}\n", a.report));
  }
}

// ---------------------------------------------------------------- predict

struct PredictArgs {
  std::string params, burst, gap, pattern = "peer", store = "st16";
  int sms = 0, bursts = 10;
  std::optional<int> gpus;  // empty: the only GPU count fitted
  bool json = false;
};

void run_predict(const PredictArgs& a) {
  const double burst = static_cast<double>(common::parse_bytes(a.burst, "--burst"));
  XS_ASSERT(burst >= 1, "--burst: '{}' is zero bytes", a.burst);
  const double gap = common::parse_duration_ns(a.gap, "--gap");
  const auto params = bg::read_params(a.params);
  const auto& group = params.find(a.pattern, a.store, a.gpus.value_or(0));
  const auto pr = bg::predict(group, a.sms, burst, gap, a.bursts);
  out(a.json ? bg::prediction_to_json(pr) : bg::format_prediction(pr));
}

// ---------------------------------------------------------------- plot

struct PlotArgs {
  std::string sweep, out, params, pattern = "peer", store = "st16", target = "mean";
  std::optional<int> sms, gpus;  // empty: the most SMs in the sweep; the only (or smallest) GPU count
};

std::vector<fs::path> write_plots(const std::vector<SweepRow>& rows, const bg::Params* params,
                                  const bg::PlotSelection& sel, const fs::path& dir, const bg::FitResult* fit) {
  std::vector<fs::path> written;
  if (!common::plot::charts_available()) {  // the fit and its reports stand without them
    out("charts skipped: this build draws no charts (PLplot was not found)\n");
    return written;
  }
  fs::create_directories(dir);
  bg::plot_issue_vs_burst(rows, params, sel, dir / "issue_vs_burst.png");
  written.push_back(dir / "issue_vs_burst.png");
  bg::plot_drain_vs_sms(rows, params, sel.store, dir / "drain_vs_sms.png");
  written.push_back(dir / "drain_vs_sms.png");
  if (params) {
    std::vector<bg::RowPrediction> fitted, held;
    if (fit) {
      fitted = fit->fitted;
      held = fit->held_out;
    } else {
      for (const auto& r : rows) {
        if (r.mode != "issue") continue;
        for (const auto& g : params->groups)
          if (g.pattern == r.pattern && g.store == r.store && g.gpus == r.gpus) {
            const double m = bg::measured_issue_ns(r, params->target);
            const double p = bg::predict_row_issue_ns(g, r, params->target);
            fitted.push_back({r, m, p, p / m - 1});
          }
      }
      XS_ASSERT(!fitted.empty(), "plot: no sweep row matches a group of the params file");
    }
    bg::plot_predicted_vs_measured(fitted, held, dir / "predicted_vs_measured.png");
    written.push_back(dir / "predicted_vs_measured.png");
  }
  return written;
}

void run_plot(const PlotArgs& a) {
  common::plot::require_charts("plot");
  const auto rows = read_sweep(a.sweep);
  std::optional<bg::Params> params;
  if (!a.params.empty()) params = bg::read_params(a.params);
  const bg::PlotSelection sel{params ? params->target : parse_target(a.target), a.pattern, a.store,
                               a.sms.value_or(0), a.gpus.value_or(0)};
  // Staged: a plot that fails leaves the folder's earlier PNGs as they were.
  common::OutputStage stage(a.out);
  const auto written = write_plots(rows, params ? &*params : nullptr, sel, stage.dir(), nullptr);
  stage.commit();
  for (const auto& p : written) out(fmt::format("wrote {}\n", (fs::path(a.out) / p.filename()).string()));
}

// ---------------------------------------------------------------- demo

struct DemoArgs {
  std::string data, out, sweep;
  bool live = false;
};

constexpr double kDemoHoldout = 0.3;
constexpr std::uint64_t kDemoSeed = 42;

void run_demo(const DemoArgs& a) {
  if (a.live && a.sweep.empty())
    XS_FAIL("demo --live: pass the live probe's sweep with --sweep FILE (the probe writes it: xstage probe ... -o FILE)");
  const fs::path sweep = a.sweep.empty() ? fs::path(a.data) / "h200_sweep.csv" : fs::path(a.sweep);
  XS_ASSERT(fs::exists(sweep), "demo: no sweep at {} (pass --sweep FILE, or --data DIR holding h200_sweep.csv)",
            sweep.string());
  const auto rows = read_sweep(sweep);
  out(fmt::format("== Burst-Gap model on {}{}\n", sweep.string(), a.live ? " (live probe)" : ""));
  const auto res = fit_and_report(rows, sweep.string(), bg::FitTarget::mean, kDemoHoldout, kDemoSeed, 40);

  // The params, report and plots are staged and moved into --out together at the end.
  common::OutputStage stage(a.out);
  const fs::path dir = stage.dir();
  bg::write_params(res.params, dir / "params.json");
  common::write_file_atomic(dir / "report.json", bg::report_to_json(res));
  const auto& g = example_group(res.params);
  std::vector<fs::path> written{dir / "params.json", dir / "report.json"};
  bg::PlotSelection sel{res.params.target, g.pattern, g.store, 0, g.gpus};
  for (const auto& p : write_plots(rows, &res.params, sel, dir, &res)) written.push_back(p);

  // One example prediction: the issue's headline configuration.
  constexpr int kSms = 132;
  constexpr double kBurst = 16384, kLongGap = 10000;
  out(fmt::format("\n== Example: {}/{}, {} SMs x {} per burst\n", g.pattern, g.store, kSms, common::format_bytes(kBurst)));
  const SweepRow *r0 = nullptr, *r10 = nullptr;
  for (const auto& r : rows)
    if (r.mode == "issue" && r.pattern == g.pattern && r.store == g.store && r.gpus == g.gpus && r.sms == kSms &&
        r.burst_bytes == kBurst) {
      if (r.gap_ns == 0) r0 = &r;
      if (r.gap_ns == kLongGap) r10 = &r;
    }
  // The model as the probe runs it: its warm-up and measured bursts, gap + loop time.
  SweepRow like = r0 ? *r0 : SweepRow{};
  like.pattern = g.pattern;
  like.store = g.store;
  like.sms = kSms;
  like.burst_bytes = kBurst;
  like.gap_ns = 0;
  const double t_sustained = bg::predict_row_issue_ns(g, like, res.params.target);
  like.gap_ns = kLongGap;
  const double t_gapped = bg::predict_row_issue_ns(g, like, res.params.target);
  out(fmt::format("model, as the probe runs it (gap + {} loop time, {} of the measured bursts): {} per burst with no "
                  "gap, {} with a 10 us gap (ratio {:.1f}x)\n",
                  common::format_ns(g.loop_overhead_ns), res.params.target == bg::FitTarget::mean ? "mean" : "median",
                  common::format_ns(t_sustained), common::format_ns(t_gapped), t_sustained / t_gapped));
  if (r0 && r10)
    out(fmt::format("sweep: median {} with no gap, {} with a 10 us gap (ratio {:.1f}x); means {} and {} ({:.1f}x)\n",
                    common::format_ns(r0->issue_ns_med), common::format_ns(r10->issue_ns_med),
                    r0->issue_ns_med / r10->issue_ns_med, common::format_ns(r0->issue_ns_mean),
                    common::format_ns(r10->issue_ns_mean), r0->issue_ns_mean / r10->issue_ns_mean));
  for (double gap : {0.0, kLongGap}) {
    out(fmt::format("\n-- xstage predict --sms {} --burst 16KiB --gap {} --bursts 6\n", kSms, gap == 0 ? "0" : "10us"));
    out(bg::format_prediction(bg::predict(g, kSms, kBurst, gap, 6)));
  }
  out("\n");
  stage.commit();
  for (const auto& p : written) out(fmt::format("wrote {}\n", (fs::path(a.out) / p.filename()).string()));
}

// ---------------------------------------------------------------- synth

struct SynthArgs {
  std::string out;
  double noise = 0.03;
  std::uint64_t seed = 7;
  int gpus = 2;
};

void run_synth(const SynthArgs& a) {
  std::vector<SweepRow> rows;
  std::uint64_t k = 0;
  for (const char* pattern : {"local", "peer", "all_peers"}) {
    auto part = bg::synthesize_sweep(bg::example_params(pattern, a.gpus), bg::SynthGrid{}, a.noise, a.seed + k++);
    rows.insert(rows.end(), part.begin(), part.end());
  }
  const std::string text = fmt::format(
      "{}: generated by `xstage synth` from invented H200-like Burst-Gap parameters (noise {}, seed {}); "
      "NOT a measurement\n{}",
      kSyntheticMark, a.noise, a.seed, format_sweep_csv(rows));
  common::write_file_atomic(a.out, text);
  out(fmt::format("wrote {} ({} rows, synthetic)\n", a.out, rows.size()));
}

// ---------------------------------------------------------------- registration

// A sub-command whose flags fill an Args and whose callback runs run(args).
template <class Args>
std::pair<CLI::App*, std::shared_ptr<Args>> command(CLI::App& app, const char* name, const char* help,
                                                    void (*run)(const Args&)) {
  auto args = std::make_shared<Args>();
  auto* c = app.add_subcommand(name, help);
  c->callback([args, run] { run(*args); });
  return {c, args};
}

// The fitted group a command reads or draws (`what`: whose choice it is).
void add_group_options(CLI::App* c, std::string& pattern, std::string& store, std::optional<int>& gpus,
                       const std::string& what) {
  c->add_option("--pattern", pattern, what + "pattern: local | peer | all_peers | host (default peer)")
      ->check(CLI::IsMember({"local", "peer", "all_peers", "host"}));
  c->add_option("--store", store, what + "store kind: st4 | st8 | st16 | tma (default st16)")
      ->check(CLI::IsMember({"st4", "st8", "st16", "tma"}));
  c->add_option("--gpus", gpus, what + "GPU count (default: the only one, or the smallest in the sweep)")
      ->check(v::min(1, "GPUs"));
}

void add_target_option(CLI::App* c, std::string& target, const std::string& what) {
  c->add_option("--target", target, "issue statistic " + what + ": mean (default) or median")
      ->check(CLI::IsMember({"mean", "median"}));
}

void add_fit(CLI::App& app) {
  auto [c, a] = command<FitArgs>(app, "fit", "Fit the Burst-Gap model to a probe sweep CSV", run_fit);
  c->add_option("sweep", a->sweep, "probe sweep CSV (xstage/include/xstage/probe/sweep.hpp)")->required()
      ->check(v::readable_file());
  // Outputs checked at parse time: a bad path fails before the fit, not after it.
  c->add_option("-o,--out", a->out, "params.json to write")->required()->check(v::output_file());
  c->add_option("--holdout", a->holdout, "fraction of each group's rows to hold out and validate on (0..0.95)")
      ->check(v::range(0, 0.95, "of the rows", "the split keeps rows of every group to fit"));
  c->add_option("--seed", a->seed, "seed of the holdout split");
  c->add_option("--report", a->report, "write the validation summary as JSON")->check(v::output_file());
  c->add_option("--max-rows", a->max_rows, "rows per printed table")->check(v::min(1, "rows"));
  add_target_option(c, a->target, "to fit");
}

void add_predict(CLI::App& app) {
  auto [c, a] = command<PredictArgs>(app, "predict", "Predict a periodic burst/gap schedule from fitted parameters",
                                     run_predict);
  c->add_option("--params", a->params, "params.json from `xstage fit`")->required()->check(v::readable_file());
  c->add_option("--sms", a->sms, "issuing SMs")->required()->check(v::range(1, 1024, "SMs"));
  c->add_option("--burst", a->burst, "bytes per SM per burst, e.g. 16KiB")->required();
  c->add_option("--gap", a->gap, "compute between bursts, e.g. 2us")->required();
  c->add_option("--bursts", a->bursts, "bursts to simulate (default 10)")->check(v::range(1, bg::kMaxPredictedBursts, "bursts"));
  add_group_options(c, a->pattern, a->store, a->gpus, "the fitted group's ");
  c->add_flag("--json", a->json, "print JSON instead of a table");
}

void add_plot(CLI::App& app) {
  auto [c, a] = command<PlotArgs>(app, "plot", "Plot a probe sweep (and the model) as PNG files", run_plot);
  c->add_option("sweep", a->sweep, "probe sweep CSV")->required()->check(v::readable_file());
  c->add_option("--out", a->out, "output directory")->required()->check(v::output_folder());
  c->add_option("--params", a->params, "params.json: adds model curves and predicted_vs_measured.png")
      ->check(v::readable_file());
  c->add_option("--sms", a->sms, "issue_vs_burst.png: SM count (default: the most in the sweep)")
      ->check(v::range(1, 1024, "SMs"));
  add_group_options(c, a->pattern, a->store, a->gpus, "the plotted rows' ");
  add_target_option(c, a->target, "to draw without --params");
}

void add_demo(CLI::App& app) {
  auto [c, a] = command<DemoArgs>(app, "demo", "Fit, validate and plot the Burst-Gap model on the embedded sweep",
                                  run_demo);
  c->add_option("--data", a->data, "directory holding h200_sweep.csv")->required()->check(v::existing_folder());
  c->add_option("--out", a->out, "output directory")->required()->check(v::output_folder());
  c->add_option("--sweep", a->sweep, "use this sweep CSV instead of DATA/h200_sweep.csv")->check(v::readable_file());
  c->add_flag("--live", a->live, "the sweep comes from a live probe on this machine (with --sweep)");
}

void add_synth(CLI::App& app) {
  auto [c, a] = command<SynthArgs>(app, "synth", "Write a SYNTHETIC sweep from invented model parameters (for dry runs)",
                                   run_synth);
  c->add_option("-o,--out", a->out, "CSV to write")->required()->check(v::output_file());
  c->add_option("--noise", a->noise, "log-normal noise on issue times (default 0.03)")
      ->check(v::range(0, 1, "log-normal sigma"));
  c->add_option("--seed", a->seed, "random seed");
  c->add_option("--gpus", a->gpus, "GPU count written in the rows (default 2)")
      ->check(v::range(2, 1024, "GPUs", "the peer patterns need a second GPU"));
}

}  // namespace

void add_model_commands(CLI::App& app) {
  add_fit(app);
  add_predict(app);
  add_plot(app);
  add_demo(app);
  add_synth(app);
}

}  // namespace xstage::cli
