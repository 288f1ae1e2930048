// The Burst-Gap model of the X-Stage: fit it to a probe sweep, predict bursts,
// advise the fused kernels. Host C++, no GPU. Full derivation: docs/xstage-burstgap.md.
//
// One parameter set per (destination pattern, store kind, GPU count). N SMs each
// issue B bytes per burst (W = N*B per GPU), then compute for a gap g (all the
// time between bursts the SM does not issue; for probe rows that is the requested
// gap plus the probe loop's own bookkeeping, measured as period - issue - gap).
//
//   t0   backpressure-free issue time per byte per SM (ns/B): R = N / t0 bytes/ns
//   a0   fixed issue latency per burst (ns); the SM injects nothing meanwhile
//   L    optional floor of a burst's free issue time (ns): a0(B) = max(a0, L - B*t0), so
//        a small burst takes L however few bytes it has (1-4 KiB all take ~0.24 us on
//        NVLink) while a large one costs a0 + B*t0. Below, a0 stands for a0(B).
//   b    optional issue buffer per SM (bytes): a burst's first b bytes leave within a0
//        and only the rest costs t0, a0(B) = max(a0 - min(B, b)*t0, L - B*t0), so the
//        free issue is a0 + max(0, B - b)*t0 (the host link: 1-4 KiB take 0.12 us,
//        then ~51 GB/s per SM from about 10 KiB). a0(B) < 0 past b.
//   D    drain rate of the X-Stage, D(N) = min(D_gpu, N * d_sm)        (bytes/ns = GB/s)
//   C    outstanding capacity,      C(N) = min(C_gpu, N * c_sm)        (bytes)
//   Q    optional backlog limit (bytes): a burst whose stores would start (after a0) on
//        more than Q in the stage first waits for it to drain to Q. C bounds what one burst can put
//        in; Q what may carry over a gap into the next (the host link: all SMs
//        storing small bursts just faster than the drain stall within a few bursts,
//        long before C of backlog has built up).
//
// Fluid occupancy q of the X-Stage. A burst starts after a0 (q drains by D*a0), and
// if q > Q then, it first waits (q - Q)/D (q <- Q);
// while issuing, dq/dt = R - D; once q reaches C, issue slows to the drain rate.
//   no fill (R <= D, or (C-q)/(R-D) >= B*t0):  T = a0 + B*t0,                 q' = q + (R-D)*B*t0
//   fill at t_f = (C-q)/(R-D) < B*t0:          T = a0 + t_f + (W - R*t_f)/D,  q' = C
// Gap: q <- max(0, q - D*g). Recovery after a burst = q'/D.
// Closed forms (Delta = (R-D)*B*t0, the occupancy one clean burst adds):
//   steady state   T_ss  = a0 + max(B*t0, W/D - min(g + a0, C/D))
//   smallest gap   g_min = max(0, Delta/D - a0)           if Delta <= C, else none exists
//   clean bursts   k     = floor((C - Delta)/(Delta - D*(g+a0))) + 1  before the first stall,
//                          or, if fewer, floor(Q/(Delta - D*(g+a0))) + 1
//   largest burst  B_max = C / (N - D*t0)                 that fits the capacity at all
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "xstage/probe/sweep.hpp"

namespace xstage::burstgap {

// ============================================================================
// Parameters
// ============================================================================

// Which capacity limit the data supports: one per GPU, one per SM, or both
// (C(N) = min(C_gpu, N*c_sm), the per-SM one binding below N = C_gpu / c_sm).
enum class CapacityScope { gpu, sm, both };
// fit: the sweep pins the value down. lower: no sweep row is sensitive to it, so
// the value is the smallest one the data cannot tell from "unlimited".
enum class Bound { fit, lower };
// Which per-row statistic of the issue time the model is fitted to and checked
// against. The fluid model is an aggregate, so it predicts the mean over SMs x
// bursts; in the sustained regime SMs are served unfairly and the median sits
// below the mean (sweep.hpp), so mean is the default.
enum class FitTarget { mean, median };

struct ModelParams {
  std::string pattern = "peer";                // local | peer | all_peers
  std::string store = "st16";                  // st4 | st8 | st16 | tma
  int gpus = 2;                                // GPUs in the fitted runs
  double t0_ns_per_byte = 0.02;                // per SM, no backpressure
  double issue_latency_ns = 0;                 // a0, per burst
  std::optional<double> issue_floor_ns;        // L; unset: a0 + B*t0 down to the smallest burst
  std::optional<double> issue_buffer_bytes;    // b, per SM; unset: 0 (every byte costs t0)
  std::optional<double> backlog_limit_bytes;   // Q, per GPU; unset: a burst starts on any backlog
  double loop_overhead_ns = 0;                 // probe rows only: period - issue - gap (median)
  double drain_GBps = 350;                     // D_gpu (GB/s = bytes/ns)
  std::optional<double> drain_per_sm_GBps;     // d_sm; unset: no per-SM drain limit
  std::optional<double> capacity_bytes_gpu;    // C_gpu; unset only for scope sm
  std::optional<double> capacity_bytes_per_sm; // c_sm; unset for scope gpu
  CapacityScope capacity_scope = CapacityScope::gpu;
  Bound drain_bound = Bound::fit;
  Bound capacity_bound = Bound::fit;
  int sms_max = 132;                           // most SMs in the fitted rows
  int n_rows = 0;                              // issue rows the fit used
  double fit_rel_error_median = 0;             // median |pred - meas| / meas on them
};

struct Params {
  int version = 1;
  std::string source_csv;
  double holdout_fraction = 0;                 // of each group's rows kept out of the fit
  std::uint64_t seed = 0;                      // of the holdout split
  FitTarget target = FitTarget::mean;          // statistic the fit used
  std::vector<ModelParams> groups;

  // The group for (pattern, store[, gpus]); gpus 0 = the only one there is.
  // Throws common::Error listing what the file has when nothing matches.
  const ModelParams& find(const std::string& pattern, const std::string& store, int gpus = 0) const;
  // The group that advises an exchange among `ranks` GPUs in which every rank stores to
  // the others (the fused kernels' epilogues): for ranks >= 3 all_peers/st16 fitted on the
  // most GPUs <= ranks, if any; else peer/st16 fitted on the most GPUs <= ranks, or on the
  // fewest when none is <= ranks. Throws listing the groups when there is no peer/st16.
  const ModelParams& for_exchange(int ranks) const;
};

const char* to_string(CapacityScope s);
const char* to_string(Bound b);
const char* to_string(FitTarget t);  // "issue_ns_mean" | "issue_ns_med"

// The row's issue time in the chosen statistic (mean falls back to the median
// when the row has no mean).
double measured_issue_ns(const SweepRow& row, FitTarget target);
// Model gap of a probe row: the requested gap plus the probe loop's bookkeeping.
double probe_gap_ns(const ModelParams& p, double requested_gap_ns);

// Strict JSON form: every field required (null where optional above), unknown
// keys rejected; errors name the field and the file in one line.
std::string params_to_json(const Params& p);
Params params_from_json(const std::string& text, const std::string& source_name);
Params read_params(const std::filesystem::path& path);
// `given` when not empty, else the measured H200 parameters shipped with the
// sources, xstage/data/h200_params.json under $XSTAGE_SOURCE_DIR when set, else under
// the working directory, else under the source tree this library was built from;
// throws (one line) when none has it.
std::filesystem::path params_path_or_default(const std::string& given);
// read_params(given) when given; else the shipped fits together: h200_params.json (two
// GPUs) with the groups of every other shipped fit beside it (h200x4_params.json: four
// GPUs), so that for_exchange(P) finds the one measured closest to P.
Params read_params_or_default(const std::string& given);
void write_params(const Params& p, const std::filesystem::path& path);  // atomic

// ============================================================================
// Model: small pure functions (bytes, ns, bytes/ns)
// ============================================================================

struct Rates {
  double inject;    // R = N / t0
  double drain;     // D(N)
  double capacity;  // C(N)
};
Rates rates(const ModelParams& p, int sms);

double latency_ns(const ModelParams& p, double burst_bytes);                      // a0(B) = max(a0 - min(B,b)*t0, L - B*t0)
double free_issue_ns(const ModelParams& p, double burst_bytes);                   // a0(B) + B*t0
double burst_increment_bytes(const ModelParams& p, int sms, double burst_bytes);  // Delta (<= 0: never fills)

struct BurstOutcome {
  double occupancy_start = 0;  // bytes in the X-Stage when the burst begins
  double issue_ns = 0;         // sender-visible issue time
  double overhead_ns = 0;      // issue_ns - free_issue_ns: the stall
  double occupancy_end = 0;    // bytes in the X-Stage after the last store issued
  double recovery_ns = 0;      // occupancy_end / D: drain time if nothing follows
  bool backpressured = false;  // the stage filled during this burst
};
BurstOutcome issue_burst(const ModelParams& p, int sms, double burst_bytes, double occupancy_start);
double after_gap(const ModelParams& p, int sms, double occupancy, double gap_ns);

// Bursts 1..n of a periodic schedule starting from an empty X-Stage.
std::vector<BurstOutcome> simulate_schedule(const ModelParams& p, int sms, double burst_bytes, double gap_ns,
                                            int bursts);
double steady_issue_ns(const ModelParams& p, int sms, double burst_bytes, double gap_ns);
double min_gap_ns(const ModelParams& p, int sms, double burst_bytes);       // +inf: no gap suffices
int clean_bursts(const ModelParams& p, int sms, double burst_bytes, double gap_ns);  // -1: never stalls
double max_burst_bytes(const ModelParams& p, int sms);                      // per SM; +inf if R <= D
// Visible mode: one burst from an empty stage until its last byte has drained.
double visible_drain_ns(const ModelParams& p, int sms, double burst_bytes);

// From an empty stage a schedule runs clean bursts, then one partly stalled
// burst, then the steady state (docs/xstage-burstgap.md). Closed form of that.
struct SchedulePhases {
  long long clean = -1;        // clean bursts before the first stall; -1: all clean
  double free_ns = 0;          // issue time of a clean burst
  double transition_ns = 0;    // burst `clean`
  double steady_ns = 0;        // bursts after it
};
SchedulePhases schedule_phases(const ModelParams& p, int sms, double burst_bytes, double gap_ns);
// Mean or median issue time of bursts first .. first+count-1 (0-based) of the
// schedule: what a probe row measures after its warm-up.
double window_issue_ns(const ModelParams& p, int sms, double burst_bytes, double gap_ns, int first, int count,
                       FitTarget stat);
// The model's value for a probe row: bursts [warmup, warmup + bursts) at the row's
// probe gap, in the given statistic.
double predict_row_issue_ns(const ModelParams& p, const SweepRow& row, FitTarget stat);

// ============================================================================
// Advisor (for the fused kernels)
// ============================================================================

struct BurstProfile {
  std::size_t bytes_per_burst = 16384;     // per SM
  int sms = 132;                           // SMs issuing the burst
  double compute_ns_between_bursts = 0;    // the gap
  int bursts = 1;                          // bursts in the schedule
  std::string pattern = "peer";            // which fitted group to use
  std::string store = "st16";
};

enum class Remedy { none, lengthen_gap, split_burst, spread_over_more_sms };
const char* to_string(Remedy r);

struct Advice {
  double predicted_stall_ns = 0;                // sum over the profile's bursts
  std::vector<double> stall_ns_per_burst;       // one per burst of the profile
  int backpressure_after_bursts = -1;           // clean bursts before the first stall; -1: none stalls
  double min_gap_ns = 0;                        // +inf: no gap suffices for this burst
  double max_burst_bytes = 0;                   // per SM, largest that fits the capacity (+inf: any)
  Remedy remedy = Remedy::none;
  int recommended_split = 1;                    // pieces per burst (split_burst)
  int recommended_sms = 0;                      // SMs to issue from (spread_over_more_sms)
  double recommended_gap_ns = 0;                // compute between (pieces of) bursts
  std::string reason;                           // one or two sentences with the numbers
};

// Validates the profile (throws common::Error). With XSTAGE_PRINT_CONFIG=1 in the
// environment, prints each distinct profile's advice once to stderr.
Advice advise(const ModelParams& p, const BurstProfile& profile);
Advice advise(const Params& params, const BurstProfile& profile);

// On a link whose stage holds the SMs' memory reads while it drains (the host link:
// with 66 SMs storing 16 KiB bursts, the 66 that store nothing and only read between
// them stretch their period from 7 to 15 us, docs/xstage-host-link.md), compute that
// reads memory (TMA-fed mainloops) waits for the remote bytes instead of overlapping
// them: `bytes` add bytes / D to it, in any order of the tiles, and the order can only
// change the compute. Nanoseconds.
double read_blocked_drain_ns(const ModelParams& p, double bytes);
// The copy engine on a link, as a bench measures it before its rows: the fixed cost of one
// stream operation (a met stream wait or a copy's issue, ms) and the rate of the copies it
// makes (GB/s; 0: the link fit's drain rate D). Schedules that hand a link's bytes to the
// copy engine (a drain) instead of SM stores are predicted with it.
struct CopyCosts {
  double op_ms = 0;
  double GBps = 0;
};

// ============================================================================
// Fitting and validation
// ============================================================================

struct FitOptions {
  FitTarget target = FitTarget::mean;
  double holdout = 0;            // fraction of each group's issue rows kept out
  std::uint64_t seed = 1;        // of the holdout split
  double free_tolerance = 0.10;  // "backpressure-free": within 10% of the free issue time
};

struct RowPrediction {
  SweepRow row;
  double measured_ns = 0;   // the row's issue time in the fit's statistic
  double predicted_ns = 0;  // steady state, at the row's probe gap
  double rel_error = 0;     // (predicted - measured) / measured
};

// Smallest backpressure-free gap of one (pattern, store, gpus, sms, burst) series.
struct MinGapCheck {
  std::string pattern, store;
  int gpus = 0, sms = 0;
  double burst_bytes = 0;
  // Gaps are requested probe gaps (gap_ns): model gaps minus loop_overhead_ns.
  std::string status;              // bracketed | free_at_all_gaps | free_at_no_gap
  bool bracketed = false;          // a stalled gap lies below the first free one
  bool scored = false;             // bracketed, and the stalled neighbour is clearly
                                   // stalled (>= 1 + 2 x tolerance): counts in the error
  bool model_agrees = false;       // unbracketed: the model also puts it outside the grid
  double free_ns = -1;             // the series' backpressure-free issue time (measured)
  double measured_grid_ns = -1;    // smallest measured gap within tolerance (-1: none)
  double measured_ns = -1;         // refined inside the bracket from the stalled row's period
  double model_ns = -1;            // model, same tolerance (+inf: none)
  double model_strict_ns = -1;     // closed-form g_min, as a requested gap (+inf: none)
  double rel_error = -1;           // |model - measured| / measured, scored rows only
};

struct DrainCheck {
  SweepRow row;
  double predicted_ns = 0;          // visible_drain_ns
  double rel_error_drain = -1;      // vs drain_ns_med   (-1: not measured)
  double rel_error_visible = -1;    // vs visible_ns_med (-1: not measured)
};

struct FitResult {
  Params params;
  std::vector<RowPrediction> fitted;    // rows the fit used
  std::vector<RowPrediction> held_out;  // empty without a holdout
  double holdout_mdape = -1;            // median |rel error| of held_out (-1: none)
  std::vector<MinGapCheck> min_gaps;
  double min_gap_median_rel_error = -1;
  std::vector<DrainCheck> drains;
  double free_tolerance = 0.10;         // the one used for min_gaps
  std::vector<std::string> notes;       // skipped groups, bounds, chosen scopes
};

// Fits every (pattern, store, gpus) group of the sweep's issue-mode rows.
FitResult fit_sweep(const std::vector<SweepRow>& rows, const FitOptions& options, const std::string& source);
// Fits one group (all rows must share pattern, store and gpus; issue mode).
ModelParams fit_group(const std::vector<SweepRow>& issue_rows, FitTarget target = FitTarget::mean,
                      std::vector<std::string>* notes = nullptr);
// true = held out. Deterministic per (seed, row configuration), independent of row order.
std::vector<bool> holdout_mask(const std::vector<SweepRow>& rows, double fraction, std::uint64_t seed);
// Uses params.target and each group's loop_overhead_ns.
std::vector<MinGapCheck> check_min_gaps(const Params& params, const std::vector<SweepRow>& rows, double tolerance);
std::string report_to_json(const FitResult& result);

// ============================================================================
// Text and JSON reports (what the CLI prints)
// ============================================================================

// Parameter table, one line per group.
std::string format_params(const Params& params);
// Notes, the held-out table (at most max_rows rows), MdAPE, the min-gap table and
// the visible-mode drain check.
std::string format_fit_report(const FitResult& result, std::size_t max_rows = 40);

// Everything `xstage predict` reports for one periodic schedule.
struct Prediction {
  ModelParams params;
  int sms = 0;
  double burst_bytes = 0, gap_ns = 0;
  std::vector<BurstOutcome> bursts;  // simulated, from an empty stage
  double free_issue_ns = 0;
  double steady_issue_ns = 0;
  double increment_bytes = 0;        // Delta
  int clean_bursts = -1;             // before the first stall; -1: never
  double min_gap_ns = 0;             // +inf: none
  double max_burst_bytes = 0;        // +inf: any
  Advice advice;
};
// At most kMaxPredictedBursts bursts (each is kept, with its outcome, in the prediction).
inline constexpr int kMaxPredictedBursts = 100000;
Prediction predict(const ModelParams& p, int sms, double burst_bytes, double gap_ns, int bursts);
std::string format_prediction(const Prediction& pr);
std::string prediction_to_json(const Prediction& pr);

// ============================================================================
// Synthetic sweeps (tests and dry runs only: never a measurement)
// ============================================================================

struct SynthBlock {
  std::vector<int> sms;
  std::vector<double> burst_bytes, gaps_ns;
};
// Defaults: the shape of the probe's standard sweep on a 132-SM GPU.
struct SynthGrid {
  std::vector<SynthBlock> blocks{
      {{132},
       {1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072},
       {0, 500, 1000, 2000, 3000, 4000, 6000, 8000, 10000, 15000, 20000}},
      {{1, 2, 4, 8, 16, 33, 66, 99}, {4096, 16384, 65536, 131072}, {0, 2000, 10000}}};
  int warmup = 8, bursts = 48;  // as the probe: 8 unmeasured, 48 measured bursts
  bool visible_rows = true;   // add visible-mode rows (132 SMs, gaps 0 and 10 us) for the drain check
};
// Issue rows from the model (the measured window of bursts at gap +
// truth.loop_overhead_ns) with multiplicative log-normal noise; stalled rows get a
// median a little below the mean, as unevenly served SMs do.
std::vector<SweepRow> synthesize_sweep(const ModelParams& truth, const SynthGrid& grid, double noise,
                                       std::uint64_t seed);
// Plausible H200-like parameters for synthetic sweeps (invented, not measured).
ModelParams example_params(const std::string& pattern, int gpus = 2);

// ============================================================================
// Plots (PNG, via common/plot)
// ============================================================================

struct PlotSelection {
  FitTarget target = FitTarget::mean;  // which issue statistic to draw
  std::string pattern = "peer", store = "st16";
  int sms = 132;   // 0 = the most SMs in the sweep for that pattern/store
  int gpus = 0;    // 0 = the only GPU count in the sweep for that pattern/store
};
// Issue time vs burst bytes per SM, one series per gap; model dashed.
void plot_issue_vs_burst(const std::vector<SweepRow>& rows, const Params* params, const PlotSelection& sel,
                         const std::filesystem::path& path);
// Sustained drain (gap 0, largest burst) vs SMs, one series per pattern; model dashed.
void plot_drain_vs_sms(const std::vector<SweepRow>& rows, const Params* params, const std::string& store,
                       const std::filesystem::path& path);
// Log-log scatter of predicted vs measured issue time, with y = x.
void plot_predicted_vs_measured(const std::vector<RowPrediction>& fitted, const std::vector<RowPrediction>& held_out,
                                const std::filesystem::path& path);

}  // namespace xstage::burstgap
