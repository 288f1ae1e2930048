// The Burst-Gap commands end to end through the `xstage` binary: a synthetic sweep
// is fitted, predicted from, plotted and demoed; bad input gets one line on stderr
// and a non-zero exit.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

struct CliResult {
  int code = -1;
  std::string out, err;
};

const fs::path& work_dir() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("xs_burstgap_cli_" + std::to_string(::getpid()));
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

CliResult xstage(const std::string& args) {
  const fs::path o = work_dir() / "stdout.txt", e = work_dir() / "stderr.txt";
  const std::string cmd = std::string("'") + XSTAGE_CLI + "' " + args + " >'" + o.string() + "' 2>'" + e.string() + "'";
  const int status = std::system(cmd.c_str());
  CliResult r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(o);
  r.err = slurp(e);
  return r;
}

std::string path(const std::string& name) { return (work_dir() / name).string(); }

// One fitted synthetic sweep shared by the tests.
class BurstGapCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(xstage("synth -o " + path("sweep.csv")).code, 0);
    const CliResult fit = xstage("fit " + path("sweep.csv") + " -o " + path("params.json") + " --holdout 0.3 --seed 3 --report " +
                           path("report.json"));
    ASSERT_EQ(fit.code, 0) << fit.err;
  }
  static void TearDownTestSuite() { fs::remove_all(work_dir()); }

  static void expect_one_line_error(const CliResult& r, const std::string& needle) {
    EXPECT_NE(r.code, 0) << r.out;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  }
};

}  // namespace

TEST_F(BurstGapCli, FitWritesParamsAndReport) {
  EXPECT_TRUE(fs::exists(path("params.json")));
  const std::string report = slurp(path("report.json"));
  EXPECT_NE(report.find("\"holdout\""), std::string::npos);
  EXPECT_NE(report.find("\"min_gap\""), std::string::npos);
}

TEST_F(BurstGapCli, PredictPrintsTheSchedule) {
  const CliResult r = xstage("predict --params " + path("params.json") + " --sms 132 --burst 16KiB --gap 2us --bursts 5");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("backpressure: yes"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("smallest gap that avoids it"), std::string::npos);
  const CliResult j = xstage("predict --params " + path("params.json") + " --sms 132 --burst 16KiB --gap 10us --json");
  ASSERT_EQ(j.code, 0) << j.err;
  EXPECT_NE(j.out.find("\"min_gap_ns\""), std::string::npos);
}

TEST_F(BurstGapCli, PredictRejectsBadInput) {
  const std::string p = "predict --params " + path("params.json");
  expect_one_line_error(xstage(p + " --sms 132 --burst -4KiB --gap 2us"), "negative");
  expect_one_line_error(xstage(p + " --sms 132 --burst lots --gap 2us"), "--burst");
  expect_one_line_error(xstage(p + " --sms 132 --burst 0 --gap 2us"), "--burst");
  expect_one_line_error(xstage(p + " --sms 0 --burst 16KiB --gap 2us"), "--sms");
  expect_one_line_error(xstage(p + " --sms 132 --burst 16KiB --gap -1us"), "--gap");
  expect_one_line_error(xstage(p + " --sms 132 --burst 16KiB --gap 5"), "--gap");
  expect_one_line_error(xstage(p + " --sms 132 --burst 16KiB --gap 2us --store tma"), "no fitted group");
  expect_one_line_error(xstage("predict --params /nonexistent.json --sms 1 --burst 1KiB --gap 0"), "nonexistent");
  // A params file with a missing field names the field and the file.
  std::string text = slurp(path("params.json"));
  const auto at = text.find("\"drain_GBps\"");
  text.replace(at, text.find('\n', at) - at + 1, "");
  std::ofstream(path("broken.json")) << text;
  const CliResult r = xstage("predict --params " + path("broken.json") + " --sms 132 --burst 16KiB --gap 2us");
  expect_one_line_error(r, "drain_GBps");
  EXPECT_NE(r.err.find("broken.json"), std::string::npos);
}

TEST_F(BurstGapCli, FitRejectsMalformedSweeps) {
  std::ofstream(path("bad.csv")) << "gpus,pattern\n2,peer\n";
  expect_one_line_error(xstage("fit " + path("bad.csv") + " -o " + path("x.json")), "missing column");
  expect_one_line_error(xstage("fit /nonexistent.csv -o " + path("x.json")), "nonexistent.csv");
  expect_one_line_error(xstage("fit " + path("sweep.csv") + " -o " + path("x.json") + " --holdout 1.5"), "--holdout");
}

// Whether this build draws charts (PLplot is optional): `xstage info` says.
bool draws_charts() { return xstage("info").out.find("charts: yes") != std::string::npos; }

TEST_F(BurstGapCli, PlotWritesThreePngs) {
  const std::string cmd = "plot " + path("sweep.csv") + " --out " + path("plots") + " --params " + path("params.json");
  if (!draws_charts()) {
    expect_one_line_error(xstage(cmd), "this build draws no charts");
    return;
  }
  const CliResult r = xstage(cmd);
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* f : {"issue_vs_burst.png", "drain_vs_sms.png", "predicted_vs_measured.png"})
    EXPECT_GT(fs::file_size(work_dir() / "plots" / f), 1000u) << f;
  expect_one_line_error(xstage("plot " + path("sweep.csv") + " --out " + path("plots") + " --sms 7"), "7 SMs");
}

// Parsed before any GPU is looked for, so they hold in CPU-only builds too.
TEST_F(BurstGapCli, BenchOptionsOutOfRangeAreRefused) {
  // The range named, not "not expected" (an option that does not exist).
  expect_one_line_error(xstage("bench moe --blocks -1"), "--blocks: Value -1 not in range");
  expect_one_line_error(xstage("bench moe --blocks 5000"), "--blocks: Value 5000 not in range");
  expect_one_line_error(xstage("bench qkv --count-checks 0"), "--count-checks: Value 0 not in range");
  expect_one_line_error(xstage("bench moe --budget-s -1"), "--budget-s");
  expect_one_line_error(xstage("bench attention --causal maybe"), "--causal: maybe not in {both,on,off}");
  expect_one_line_error(xstage("bench ulysses --torch maybe"), "--torch: maybe not in {auto,off}");
  expect_one_line_error(xstage("dit --gemm-epilogues bogus"), "--gemm-epilogues: bogus not in {fused,separate}");
  expect_one_line_error(xstage("dit --cpu --breakdown"), "--breakdown times the GPU path's phases");
  expect_one_line_error(xstage("dit --png phases.png"), "--png draws --breakdown's phases");
  // Output paths are checked before the run (a missing directory is created later; a part
  // of the path that is a file cannot be): the same for every long-running command.
  std::ofstream(work_dir() / "afile") << "x";
  const std::string bad = path("afile") + "/out";
  if (draws_charts())
    expect_one_line_error(xstage("dit --breakdown --png " + bad + ".png"), "dit: --png " + bad + ".png: " +
                                                                             path("afile") + " is not a directory");
  else
    expect_one_line_error(xstage("dit --breakdown --png " + bad + ".png"), "this build draws no charts");
  expect_one_line_error(xstage("dit --cpu --json " + bad + ".json"), "afile is not a directory");
  expect_one_line_error(xstage("dit --json " + path("")), "is a directory");
  expect_one_line_error(xstage("bench moe --json " + bad + ".json"), "bench moe: --json");
  expect_one_line_error(xstage("bench moe --png " + bad + ".png"), "bench moe: --png");
  expect_one_line_error(xstage("bench ulysses --json " + bad + ".json"), "bench ulysses: --json");
  expect_one_line_error(xstage("bench attention --json " + bad + ".json"), "bench attention: --json");
  expect_one_line_error(xstage("bench qkv --json " + bad + ".json"), "bench qkv: --json");
  EXPECT_FALSE(fs::exists(work_dir() / "afile" / "out.json"));
}

TEST_F(BurstGapCli, DitPlanNeedsNoGpu) {
  const std::string plan = "dit --plan --params " + path("params.json");
  const CliResult r = xstage(plan + " --preset flux-like --tokens 4096 --gpus 4 --plan-json " + path("plan.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("plan: flux-like, 4096 tokens on P = 4 (no padding, 1024 per rank), 57 blocks"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("QKV order, rank 0: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("attention order, rank 0: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sends 14.16 MB before attention and 4.72 MB after"), std::string::npos) << r.out;
  const std::string j = slurp(path("plan.json"));
  EXPECT_NE(j.find("\"pre_a2a_bytes\": 14155776"), std::string::npos) << j;  // 3 x 1024 x 3072 x 2 B x 3/4
  EXPECT_NE(j.find("\"attention_predicted_stall_us\""), std::string::npos);
  const CliResult wan = xstage(plan + " --preset wan-like --tokens 75600 --gpus 4");
  ASSERT_EQ(wan.code, 0) << wan.err;
  EXPECT_NE(wan.out.find("(padded to 75776, 18944 per rank)"), std::string::npos) << wan.out;
  EXPECT_NE(wan.out.find("56832-75775   18768     176"), std::string::npos) << wan.out;
  // An MoE preset adds the MoE exchange and both schedules' predicted stalls: rank r
  // sends 3/4 of its 1024 x 2 (token, slot) rows of 3072 bf16.
  const CliResult moe = xstage(plan + " --preset dit-moe --tokens 4096 --gpus 4 --plan-json " + path("moe_plan.json"));
  ASSERT_EQ(moe.code, 0) << moe.err;
  EXPECT_NE(moe.out.find("MoE dispatch and combine 9.44 MB each (uniform routing)"), std::string::npos) << moe.out;
  EXPECT_NE(moe.out.find("MoE Interleaved (predicted stall "), std::string::npos) << moe.out;
  EXPECT_NE(moe.out.find("MoE Expert-Wave (predicted stall "), std::string::npos) << moe.out;
  const auto moe_json = nlohmann::json::parse(slurp(path("moe_plan.json")));
  EXPECT_TRUE(moe_json.contains("moe") && moe_json["moe"].contains("expert_wave_predicted_stall_us")) << moe_json;
  expect_one_line_error(xstage(plan + " --cpu"), "--plan runs nothing");
  expect_one_line_error(xstage("dit --plan-json " + path("p2.json")), "give --plan too");
  expect_one_line_error(xstage(plan + " --plan-json " + path("")), "is a directory");
  expect_one_line_error(xstage(plan + " --preset flux-like --tokens 4096 --gpus 5"), "24 heads do not split over P = 5");
  EXPECT_FALSE(fs::exists(work_dir() / "p2.json"));
  // The shipped H200 parameters are found from any working directory, without XSTAGE_SOURCE_DIR.
  const std::string elsewhere = "cd '" + work_dir().string() + "' && env -u XSTAGE_SOURCE_DIR '" + XSTAGE_CLI +
                                "' dit --plan --preset flux-like --tokens 4096 --gpus 2 >'" + path("o.txt") + "' 2>&1";
  EXPECT_EQ(std::system(elsewhere.c_str()), 0) << slurp(path("o.txt"));
  EXPECT_NE(slurp(path("o.txt")).find("Burst-Gap peer/st16 fitted on 2 GPUs (drain 4"), std::string::npos)
      << slurp(path("o.txt"));
}

// The fp32 CPU reference of a tiny preset: its weights saved and loaded again give the
// same sample bit for bit; the results file keeps one row per configuration (a rerun
// replaces its row, another step count adds one).
TEST_F(BurstGapCli, DitCpuReferenceRunsAndItsWeightsRoundTrip) {
  const std::string cpu = "dit --cpu --preset tiny-moe --tokens 64 --quiet --json " + path("dit.json");
  const CliResult saved = xstage(cpu + " --steps 2 --save-weights " + path("w.safetensors"));
  ASSERT_EQ(saved.code, 0) << saved.err;
  const CliResult loaded = xstage(cpu + " --steps 2 --weights " + path("w.safetensors"));
  ASSERT_EQ(loaded.code, 0) << loaded.err;
  const auto sample = [](const std::string& out) { return out.substr(out.find("max |x|")); };
  EXPECT_EQ(sample(saved.out), sample(loaded.out)) << saved.out << loaded.out;
  EXPECT_NE(saved.out.find("dit cpu: tiny-moe tokens 64 (1x8x8) blocks 2 steps 2: "), std::string::npos) << saved.out;
  EXPECT_NE(loaded.out.find("(1 rows)"), std::string::npos) << loaded.out;
  ASSERT_EQ(xstage(cpu + " --steps 1").code, 0);
  const auto rows = nlohmann::json::parse(slurp(path("dit.json")))["rows"];
  ASSERT_EQ(rows.size(), 2u) << rows;
  EXPECT_EQ(rows[0]["path"], "cpu");
  EXPECT_GT(rows[0]["latent_max_abs"].get<double>(), 0.0);
  expect_one_line_error(xstage("dit --cpu --preset flux-like --tokens 64"), "meant for the tiny presets");
  expect_one_line_error(xstage(cpu + " --gpus 2"), "one rank");
}

// The model's side of the host-link MoE sweep runs without a GPU: one table row per
// selected configuration, and JSON rows whose speedup is Expert-Wave's forward (compute +
// stall + the combine's reads back) over the advisor's schedule's (Interleaved with SM
// stores, or the drain in the order predicted faster with it where that is more than 15 %
// faster), the shipped host-link fit's.
TEST_F(BurstGapCli, BenchMoeHostLinkPredictsWithoutAGpu) {
  const CliResult r = xstage("bench moe --link host --predict-only --tokens 2048 --ep 4 --routing skewed --json " +
                             path("moe_predict.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2 + 12 + 1) << r.out;  // header, 12 shapes, summary
  EXPECT_NE(r.out.find("predicted Expert-Wave over the advisor's schedule: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fit host/st16"), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(slurp(path("moe_predict.json")));
  ASSERT_EQ(j["rows"].size(), 12u);
  int stalls = 0;
  for (const auto& row : j["rows"]) {
    const double c = row["predicted_compute_us"], ci = row["predicted_compute_interleaved_us"],
                 ew = row["predicted_stall_expert_wave_us"], il = row["predicted_stall_interleaved_us"];
    EXPECT_GT(c, 0.0);
    EXPECT_GT(ci, 0.0);
    const double ew_us = row["predicted_expert_wave_us"], il_us = row["predicted_interleaved_us"],
                 il_drain_us = row["predicted_drain_us"], ew_drain_us = row["predicted_drain_expert_wave_us"];
    EXPECT_GT(ew_us, c + ew);  // the combine's reads back
    EXPECT_NEAR(ew_us - c - ew, il_us - ci - il, 1e-6);  // the same reads in either order
    const bool il_order = il_drain_us < 0.98 * ew_drain_us;  // moe::kDrainOrderMargin, 2 %
    const double drain_us = il_order ? il_drain_us : ew_drain_us;
    const double stores_us = std::min(il_us, ew_us);
    const bool drain = drain_us < 0.85 * stores_us;  // moe::kDrainMargin, 15 %
    const bool il_stores = il_us < 0.95 * ew_us;  // moe::kSmOrderMargin, 5 %
    const std::string want =
        drain ? (il_order ? "drain" : "drain_expert_wave") : il_stores ? "sm_stores" : "expert_wave";
    EXPECT_EQ(row["schedule"], want) << row;
    const double advised_us = drain ? drain_us : il_stores ? il_us : ew_us;
    EXPECT_NEAR(row["predicted_speedup"].get<double>(), ew_us / advised_us, 1e-9);
    stalls += ew > 0.01 * c;
  }
  EXPECT_EQ(j["rows_where_stall_predicted"].get<int>(), stalls);
  expect_one_line_error(xstage("bench moe --predict-only"), "--predict-only needs --link host");
}

TEST_F(BurstGapCli, DemoFitsValidatesPlotsAndPredicts) {
  const CliResult r = xstage("demo --data " + path("") + " --sweep " + path("sweep.csv") + " --out " + path("demo"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("SYNTHETIC"), std::string::npos);
  EXPECT_NE(r.out.find("MdAPE"), std::string::npos);
  EXPECT_NE(r.out.find("10 us gap"), std::string::npos);
  for (const char* f : {"params.json", "report.json"}) EXPECT_TRUE(fs::exists(work_dir() / "demo" / f)) << f;
  for (const char* f : {"issue_vs_burst.png", "drain_vs_sms.png", "predicted_vs_measured.png"})
    EXPECT_EQ(fs::exists(work_dir() / "demo" / f), draws_charts()) << f;
  expect_one_line_error(xstage("demo --data " + path("") + " --out " + path("demo2")), "h200_sweep.csv");
  expect_one_line_error(xstage("demo --data " + path("nowhere") + " --out " + path("demo2")), "no such folder");
  EXPECT_FALSE(fs::exists(work_dir() / "demo2"));
}

// Each class of bad input once: one line, a non-zero exit, nothing written.
TEST_F(BurstGapCli, BadInputIsRefusedBeforeAnyWork) {
  const std::string sweep = path("sweep.csv"), params = path("params.json");
  std::ofstream(work_dir() / "afile") << "x";
  const std::string before = slurp(params);
  // Numbers out of range or not finite, with the unit.
  expect_one_line_error(xstage("dit --plan --gpus 0"), "--gpus: 0 GPUs is out of range (1 .. 8 GPUs)");
  expect_one_line_error(xstage("dit --cpu --tokens 2147483647"), "--tokens:");
  expect_one_line_error(xstage("dit --plan --tokens 2147483647"), "tokens is out of range");
  expect_one_line_error(xstage("dit --blocks 0"), "--blocks: 0 blocks is below the minimum 1 blocks");
  expect_one_line_error(xstage("predict --params " + params + " --sms nan --burst 1KiB --gap 0"), "is not finite");
  expect_one_line_error(xstage("predict --params " + params + " --sms 1 --burst 1KiB --gap 0 --bursts 0"),
                        "--bursts: 0 bursts is out of range");
  // The command line's range is the model's: refused by CLI11 with the range, not later by the library.
  expect_one_line_error(xstage("predict --params " + params + " --sms 1 --burst 1KiB --gap 0 --bursts 100001"),
                        "--bursts: 100001 bursts is out of range (1 .. 100000 bursts)");
  expect_one_line_error(xstage("predict --params " + params + " --sms 1 --burst 1KiB --gap 1e30s"), "--gap");
  expect_one_line_error(xstage("synth -o " + path("s1.csv") + " --gpus 1"), "--gpus: 1 GPUs is out of range");
  expect_one_line_error(xstage("bench moe --budget-s -1"), "-1 s is below the minimum 0 s");
  expect_one_line_error(xstage("bench ulysses --min-seq 5000"), "not a power of two");
  // Names outside their set; repeated list items.
  expect_one_line_error(xstage("dit --preset nope"), "--preset: nope not in");
  expect_one_line_error(xstage("predict --params " + params + " --sms 1 --burst 1KiB --gap 0 --store st3"), "--store");
  expect_one_line_error(xstage("bench moe --ep 2,2"), "--ep: 2 is given twice (items 1 and 2)");
  expect_one_line_error(xstage("bench qkv --seq 4096,4096"), "--seq: 4096 is given twice");
  expect_one_line_error(xstage("bench attention --seq 4K,4K"), "--seq: 4096 is given twice");
  // Files: a folder where a file goes, a missing folder, a sweep without its columns.
  expect_one_line_error(xstage("predict --params " + work_dir().string() + " --sms 1 --burst 1KiB --gap 0"),
                        "is a folder, not a file");
  expect_one_line_error(xstage("fit " + work_dir().string() + " -o " + path("f.json")), "is a folder, not a file");
  expect_one_line_error(xstage("dit --weights " + work_dir().string()), "is a folder, not a file");
  expect_one_line_error(xstage("probe-results " + path("nowhere")), "no such folder");
  std::ofstream(path("cols.csv")) << "gpus,pattern,store\n2,peer,st16\n";
  expect_one_line_error(xstage("fit " + path("cols.csv") + " -o " + path("f.json")), "missing column 'mode' (it has:");
  // Outputs checked before the fit; the old params stay as they were.
  expect_one_line_error(xstage("fit " + sweep + " -o " + work_dir().string()), "--out");
  expect_one_line_error(xstage("fit " + sweep + " -o " + params + " --report " + path("afile") + "/r.json"),
                        "afile is not a directory");
  expect_one_line_error(xstage("plot " + sweep + " --out " + path("afile")), "afile is not a directory");
  expect_one_line_error(xstage("dit --cpu --save-weights " + path("afile") + "/w.safetensors"), "--save-weights");
  EXPECT_EQ(slurp(params), before);
  for (const char* f : {"f.json", "s1.csv"}) EXPECT_FALSE(fs::exists(work_dir() / f)) << f;
}

// Without a GPU (or in a build without CUDA) the GPU commands say so in one line, not
// with the CUDA runtime's first failing call.
TEST_F(BurstGapCli, GpuCommandsSayTheyNeedAGpu) {
  if (xstage("info").out.find("gpus: 0") == std::string::npos) GTEST_SKIP() << "a GPU is visible";
  for (const char* cmd : {"bench qkv", "bench attention", "bench moe", "bench ulysses", "probe", "dit"}) {
    const CliResult r = xstage(cmd);
    const bool cuda = r.err.find("built without CUDA") == std::string::npos;
    expect_one_line_error(r, cuda ? "needs a CUDA GPU" : "built without CUDA");
    EXPECT_EQ(r.err.find("driver version is insufficient"), std::string::npos) << r.err;
  }
}

// An allocation that fails anyway (here under a small address-space limit) ends in one
// line naming the command, not a bare std::bad_alloc.
TEST_F(BurstGapCli, OutOfMemoryNamesTheCommand) {
  const std::string cmd = "ulimit -v 2000000 && '" + std::string(XSTAGE_CLI) + "' dit --cpu --quiet --tokens 1048576 >'" +
                          path("o.txt") + "' 2>'" + path("e.txt") + "'";
  const int status = std::system(cmd.c_str());
  const std::string err = slurp(path("e.txt"));
  if (err.find("error while loading shared libraries") != std::string::npos) GTEST_SKIP() << "the limit is too small here";
  EXPECT_NE(status, 0);
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find("dit: out of host memory"), std::string::npos) << err;
}

// moe-results draws the `--sweep one` heatmap from a results file without a GPU; a file
// without EP = 1 rows is refused in one line and leaves an existing PNG as it was.
TEST_F(BurstGapCli, MoeResultsDrawsTheCublasHeatmap) {
  const std::string json = path("moe.json"), empty = path("empty.json"), png = path("moe.png");
  std::ofstream(json) << R"({"one_gpu_card": "H200", "rows": [{"ep": 1, "experts": 64, "topk": 2, "hidden": 4096,
    "intermediate": 2048, "tokens_per_rank": 512, "routing": "uniform", "fused_over_cublas": 0.98,
    "fused_over_cublas_exact": 1.04, "correct": true}]})";
  std::ofstream(empty) << R"({"rows": [{"ep": 2, "experts": 64}]})";
  std::ofstream(png) << "keep";
  expect_one_line_error(xstage("moe-results --json " + empty + " --png " + png), "no EP = 1 rows");
  EXPECT_EQ(slurp(png), "keep");
  expect_one_line_error(xstage("moe-results --json " + path("absent.json") + " --png " + png), "absent.json");
  if (!draws_charts()) return;
  const CliResult r = xstage("moe-results --json " + json + " --png " + png);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_GT(fs::file_size(png), 1000u);
  EXPECT_EQ(slurp(png).substr(1, 3), "PNG");
}

// host-link-results re-measures one part alone: a sweep given replaces its section, the
// probe and the other sweep are kept from the file it rewrites; with no file to keep the
// probe from, --probe is asked for in one line.
TEST_F(BurstGapCli, HostLinkResultsKeepsThePartsNotGiven) {
  const std::string out = path("host_link.json"), moe = path("moe_host.json");
  std::ofstream(out) << R"({"probe": {"card": "H200", "gpus": 1, "date": "d0", "command": "probe",
    "backpressure_ratio": 61.0, "backpressure_ratio_mean": 60.0, "backpressure_ratio_by_store": {},
    "holdout_median_rel_error": 0.06, "min_gap_rel_error": 0.19, "sustained_drain_GBps": 52.7},
    "ulysses": {"rows_where_stall_predicted": 0, "rows": [{"correct": true, "P": 2,
      "predicted_speedup_vs_row_major": 1.0, "speedup_vs_row_major": 0.9}]}})";
  std::ofstream(moe) << R"({"command": "bench moe", "date": "d1", "summary": {"rows_where_stall_predicted": 1},
    "rows": [{"tokens_per_rank": 512, "experts": 64, "topk": 2, "hidden": 4096, "intermediate": 2048, "ep": 4,
      "routing": "uniform", "expert_wave_us": 110.0, "interleaved_us": 100.0, "speedup": 1.1,
      "predicted_speedup": 1.21, "predicted_compute_us": 90.0, "predicted_stall_expert_wave_us": 20.0,
      "predicted_stall_interleaved_us": 0.0, "correct": true, "sms": 132, "not_kept": 7}]})";
  const CliResult r = xstage("host-link-results --moe " + moe + " -o " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string j = slurp(out);
  EXPECT_NE(j.find("\"backpressure_ratio\": 61.0"), std::string::npos) << j;
  EXPECT_NE(j.find("\"speedup_vs_row_major\": 0.9"), std::string::npos) << j;
  EXPECT_NE(j.find("\"predicted_stall_expert_wave_us\": 20.0"), std::string::npos) << j;
  EXPECT_EQ(j.find("not_kept"), std::string::npos) << j;
  // Median of |predicted / measured - 1| over both sweeps' rows: 0.1 and 0.111...
  EXPECT_NE(j.find("\"speedup_prediction_median_abs_rel_error\": 0.10555"), std::string::npos) << j;
  // The time-model check: 110 / (90 + 20) with the row's own predictions; this build's
  // model re-predicts the same configuration.
  const auto check = nlohmann::json::parse(j)["moe"]["time_model_check"];
  EXPECT_DOUBLE_EQ(check["at_measurement"]["median"].get<double>(), 1.0) << check;
  EXPECT_EQ(check["current_model"]["rows"].get<int>(), 1) << check;
  EXPECT_GT(check["current_model"]["median"].get<double>(), 0.0) << check;
  // The kept Ulysses row has no drain to re-predict.
  const auto drain = nlohmann::json::parse(j)["ulysses"]["drain_model_check"];
  EXPECT_EQ(drain["current_model"]["predictions"].get<int>(), 0) << drain;
  expect_one_line_error(xstage("host-link-results --moe " + moe + " -o " + path("fresh.json")), "give --probe");
  // Both sweeps' predicted-against-measured plots, one colour per rank count.
  if (!draws_charts()) return;
  fs::create_directories(work_dir() / "png");
  const CliResult drawn = xstage("host-link-results -o " + out + " --png-dir " + path("png"));
  ASSERT_EQ(drawn.code, 0) << drawn.err;
  for (const char* f : {"host_link_moe_speedup.png", "host_link_ulysses_speedup.png"})
    EXPECT_GT(fs::file_size(work_dir() / "png" / f), 1000u) << f;
}

// The Ulysses rows' achievable bound needs the SM count: a row's own `sms`, else --sms
// (written into the row); a row with neither ends in one line asking for --sms.
TEST_F(BurstGapCli, HostLinkResultsBoundsUlyssesRowsWithTheirSms) {
  const std::string out = path("host_link.json");
  // P = 2, S = 4096, H = 24, D = 128: 384 tiles, 3 rounds on 132 SMs; 6,291,456 bytes at 60 GB/s.
  const std::string row = R"({"S": 4096, "P": 2, "H": 24, "D": 128, "rank": 0, "attention_guided_ms": 0.15,
    "fused_row_major_ms": 0.26, "copy_GBps": 60.0, "speedup_vs_row_major": 1.3, "stall_predicted": true,
    "predicted_speedup_vs_row_major": 1.3, "correct": true})";
  auto write = [&] {
    std::ofstream(out) << R"({"probe": {"card": "H200", "gpus": 1, "date": "d0", "command": "probe",
      "backpressure_ratio": 61.0, "backpressure_ratio_mean": 60.0, "backpressure_ratio_by_store": {},
      "holdout_median_rel_error": 0.06, "min_gap_rel_error": 0.19, "sustained_drain_GBps": 52.7},
      "ulysses": {"rows_where_stall_predicted": 1, "rows": [)" << row << "]}}";
  };
  write();
  expect_one_line_error(xstage("host-link-results -o " + out), "--sms");
  write();
  const CliResult r = xstage("host-link-results --sms 132 -o " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto u = nlohmann::json::parse(slurp(out))["ulysses"];
  const double achievable = 0.05 + 6291456 / 60e6;
  EXPECT_EQ(u["rows"][0]["sms"].get<int>(), 132) << u;
  EXPECT_NEAR(u["rows"][0]["achievable_ms"].get<double>(), achievable, 1e-12) << u;
  EXPECT_NEAR(u["achievable_bound_geomean_where_stall_predicted"].get<double>(), 0.26 / achievable, 1e-12) << u;
  EXPECT_NEAR(u["speedup_over_achievable_bound_geomean"].get<double>(), 1.3 * achievable / 0.26, 1e-12) << u;
  // The row now carries its sms: no --sms needed, and the row's own wins over one given.
  EXPECT_EQ(xstage("host-link-results -o " + out).code, 0);
  ASSERT_EQ(xstage("host-link-results --sms 64 -o " + out).code, 0);
  EXPECT_NEAR(nlohmann::json::parse(slurp(out))["ulysses"]["rows"][0]["achievable_ms"].get<double>(), achievable,
              1e-12);
}

// Several MoE sweeps (the standard one and `--sweep eight`) make one section: rows of
// both, a configuration measured in both taken from the later file, a profiled row's
// phase shares kept, and the summary recomputed over the joined rows rather than copied
// from either file; rows without their SM count need --sms.
TEST_F(BurstGapCli, HostLinkResultsJoinsSeveralMoeSweeps) {
  const std::string out = path("host_link.json"), a = path("moe_a.json"), b = path("moe_b.json");
  std::ofstream(out) << R"({"probe": {"card": "H200", "gpus": 1, "date": "d0", "command": "probe",
    "backpressure_ratio": 61.0, "backpressure_ratio_mean": 60.0, "backpressure_ratio_by_store": {},
    "holdout_median_rel_error": 0.06, "min_gap_rel_error": 0.19, "sustained_drain_GBps": 52.7}})";
  auto row = [](int ep, double ew, double il, double stall_ew) {
    return fmt::format(R"({{"tokens_per_rank": 512, "experts": 64, "topk": 2, "hidden": 4096, "intermediate": 2048,
      "ep": {}, "routing": "uniform", "expert_wave_us": {}, "interleaved_us": {}, "speedup": {},
      "predicted_speedup": 1.0, "predicted_compute_us": 100.0, "predicted_stall_expert_wave_us": {},
      "predicted_stall_interleaved_us": 0.0, "correct": true}})",
                       ep, ew, il, ew / il, stall_ew);
  };
  const std::string summary = R"("summary": {"rows_where_stall_predicted": 99, "geomean_where_stall_predicted": 9.0})";
  std::ofstream(a) << R"({"command": "bench moe a", "date": "d1", )" << summary << R"(, "rows": [)" << row(2, 100, 100, 0)
                   << "," << row(4, 400, 100, 50) << "]}";
  std::string profiled = row(8, 800, 100, 50);  // a --profile run's row keeps its phase shares
  profiled.insert(profiled.rfind('}'), R"(, "profile": {"expert_wave": {"consumer_shares": {"combine": 0.4}}})");
  std::ofstream(b) << R"({"command": "bench moe b", "date": "d2", )" << summary << R"(, "rows": [)" << row(4, 200, 100, 50)
                   << "," << profiled << "]}";
  // Rows of benches that did not record their SM count are re-predicted on --sms, and
  // without it are refused in one line.
  expect_one_line_error(xstage("host-link-results --moe " + a + " --moe " + b + " -o " + out), "--sms");
  const CliResult r = xstage("host-link-results --moe " + a + " --moe " + b + " --sms 132 -o " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto moe = nlohmann::json::parse(slurp(out))["moe"];
  ASSERT_EQ(moe["rows"].size(), 3u) << moe;
  EXPECT_DOUBLE_EQ(moe["rows"][1]["speedup"].get<double>(), 2.0) << "P = 4 from the later file";
  EXPECT_EQ(moe["rows_where_stall_predicted"].get<int>(), 2) << moe;
  EXPECT_DOUBLE_EQ(moe["geomean_where_stall_predicted"].get<double>(), 4.0) << moe;  // sqrt(2 * 8)
  EXPECT_DOUBLE_EQ(moe["max_speedup"].get<double>(), 8.0) << moe;
  EXPECT_DOUBLE_EQ(moe["min_speedup"].get<double>(), 1.0) << moe;
  EXPECT_EQ(moe["command"], nlohmann::json({"bench moe a", "bench moe b"})) << moe;
  EXPECT_EQ(moe["date"], "d2") << moe;
  EXPECT_DOUBLE_EQ(moe["rows"][2]["profile"]["expert_wave"]["consumer_shares"]["combine"].get<double>(), 0.4);
  EXPECT_FALSE(moe["rows"][0].contains("profile"));
}

// The shipped parameters (xstage/data/*_params.json) and the probe sections of the
// results files (docs/results/probe.json, host_link.json) are what this build's fit makes
// of the shipped sweeps, so a change to the model cannot leave them behind.
namespace {
// Every number of `a` and `b` by path, within a relative 1e-6 (the fit's arithmetic may
// round differently under another compiler); other values equal; keys in `skip` ignored.
void expect_same_numbers(const nlohmann::json& a, const nlohmann::json& b, const std::string& where,
                         const std::vector<std::string>& skip = {}) {
  if (a.is_number() && b.is_number()) {
    const double x = a.get<double>(), y = b.get<double>();
    EXPECT_LE(std::abs(x - y), 1e-6 * std::max(1.0, std::abs(y))) << where << ": " << x << " against " << y;
  } else if (a.is_object() && b.is_object()) {
    for (const auto& [k, v] : b.items()) {
      if (std::find(skip.begin(), skip.end(), k) != skip.end()) continue;
      ASSERT_TRUE(a.contains(k)) << where << "." << k << " is missing";
      expect_same_numbers(a.at(k), v, where + "." + k, skip);
    }
    for (const auto& [k, v] : a.items())
      EXPECT_TRUE(b.contains(k) || std::find(skip.begin(), skip.end(), k) != skip.end())
          << where << "." << k << " is new";
  } else if (a.is_array() && b.is_array()) {
    ASSERT_EQ(a.size(), b.size()) << where;
    for (std::size_t i = 0; i < a.size(); ++i) expect_same_numbers(a[i], b[i], fmt::format("{}[{}]", where, i), skip);
  } else {
    EXPECT_EQ(a, b) << where;
  }
}

nlohmann::json read_json_file(const fs::path& p) { return nlohmann::json::parse(slurp(p)); }

// A probe folder as `xstage probe` and the device stage's fit leave it, from a shipped sweep.
fs::path fitted_probe_dir(const fs::path& src, const std::string& prefix) {
  const fs::path d = work_dir() / ("shipped_" + prefix);
  fs::create_directories(d);
  fs::copy_file(src / "xstage/data" / (prefix + "_sweep.csv"), d / "sweep.csv", fs::copy_options::overwrite_existing);
  fs::copy_file(src / "xstage/data" / (prefix + "_probe_summary.json"), d / "probe_summary.json",
                fs::copy_options::overwrite_existing);
  const CliResult fit = xstage(fmt::format("fit '{}' -o '{}' --holdout 0.3 --seed 1 --report '{}'",
                                           (d / "sweep.csv").string(), (d / "params.json").string(),
                                           (d / "report.json").string()));
  EXPECT_EQ(fit.code, 0) << fit.err;
  return d;
}
}  // namespace

TEST_F(BurstGapCli, ShippedFitsAndResultsAreThisBuildsFitOfTheShippedSweeps) {
  const char* env = std::getenv("XSTAGE_SOURCE_DIR");
  ASSERT_NE(env, nullptr) << "run through ctest (XSTAGE_SOURCE_DIR)";
  const fs::path src = env;
  std::map<std::string, fs::path> dirs;
  for (const char* prefix : {"h200", "h200x4", "h200_host"}) {
    dirs[prefix] = fitted_probe_dir(src, prefix);
    expect_same_numbers(read_json_file(dirs[prefix] / "params.json"),
                        read_json_file(src / "xstage/data" / (std::string(prefix) + "_params.json")),
                        std::string(prefix) + "_params.json", {"source_csv"});
  }
  const fs::path probe = work_dir() / "probe.json";
  const CliResult r = xstage(fmt::format("probe-results '{}' '{}' -o '{}'", dirs["h200"].string(),
                                         dirs["h200x4"].string(), probe.string()));
  ASSERT_EQ(r.code, 0) << r.err;
  expect_same_numbers(read_json_file(probe), read_json_file(src / "docs/results/probe.json"), "probe.json",
                      {"source_csv"});
  // host-link-results keeps the fused-kernel sections of the file it rewrites: only the
  // probe section is compared.
  const fs::path host = work_dir() / "host_link.json";
  fs::copy_file(src / "docs/results/host_link.json", host, fs::copy_options::overwrite_existing);
  const CliResult h = xstage(fmt::format("host-link-results --probe '{}' -o '{}'", dirs["h200_host"].string(), host.string()));
  ASSERT_EQ(h.code, 0) << h.err;
  expect_same_numbers(read_json_file(host)["probe"], read_json_file(src / "docs/results/host_link.json")["probe"],
                      "host_link.json probe", {"source_csv"});
}
