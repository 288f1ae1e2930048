// The bench harness on the CPU: the table lines up as the benches' printf formats
// did, the results file keeps other runs' rows and is rewritten after every row,
// and a row whose check failed is marked and counted.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "common/files.hpp"
#include "xstage/bench/moe_bench.hpp"
#include "xstage/bench/report.hpp"

namespace fs = std::filesystem;
using namespace xstage::bench;

namespace {

const fs::path& temp_dir() {
  static const struct Dir {
    fs::path path = fs::temp_directory_path() / ("xs_bench_tests_" + std::to_string(::getpid()));
    Dir() { fs::create_directories(path); }
    ~Dir() { fs::remove_all(path); }
  } dir;
  return dir.path;
}

fs::path temp_file(const std::string& name) { return temp_dir() / name; }

nlohmann::json read_json(const fs::path& p) { return nlohmann::json::parse(common::read_file(p)); }

}  // namespace

TEST(BenchTable, LinesUpLikeThePrintfFormats) {
  const Table t({{"S", 6}, {"routing", 7, "", true}, {"ms", 8, ".3f", false, true}, {"err", 9, ".2e"}, {"ok", 0}});
  char want[128];
  std::snprintf(want, sizeof want, "%6s %-7s | %8s %9s %s", "S", "routing", "ms", "err", "ok");
  EXPECT_EQ(t.header(), want);
  std::snprintf(want, sizeof want, "%6ld %-7s | %8.3f %9.2e %s", 4096L, "skewed", 1.23456, 3.2e-5, "yes");
  EXPECT_EQ(t.line({4096LL, std::string("skewed"), 1.23456, 3.2e-5, std::string("yes")}), want);
  // Missing values print "-", aligned like a number.
  std::snprintf(want, sizeof want, "%6ld %-7s | %8s %9s %s", 1L, "", "-", "-", "-");
  EXPECT_EQ(t.line({1LL, std::string(""), Cell(), cell(std::nullopt), Cell()}), want);
  EXPECT_THROW(t.line({1LL}), std::exception);
}

TEST(BenchResultsFile, KeepsOtherRunsRowsAndReplacesTheSameKey) {
  const fs::path p = temp_file("keep.json");
  common::write_file_atomic(p, R"({"rows": [{"k": "a", "v": 1}, {"k": "b", "v": 2}]})");
  ResultsFile f(p.string(), run_head("card", 2, "xstage test"));
  f.keep_other_rows([](const nlohmann::json& r) { return r.value("k", ""); });
  f.add({{"k", "b"}, {"v", 3}});
  f.add({{"k", "c"}, {"v", 4}});
  f.write();
  EXPECT_EQ(f.rows_written(), 3u);
  const auto j = read_json(p);
  ASSERT_EQ(j["rows"].size(), 3u);
  EXPECT_EQ(j["rows"][0]["k"], "a");
  EXPECT_EQ(j["rows"][1]["v"], 3);
  EXPECT_EQ(j["card"], "card");
  EXPECT_EQ(j["command"], "xstage test");
  common::write_file_atomic(p, "not json");
  ResultsFile bad(p.string(), {});
  EXPECT_THROW(bad.keep_other_rows([](const nlohmann::json&) { return std::string(); }), std::exception);
}

TEST(BenchResultsFile, KeepsTheOtherRunsHeadWhereAsked) {
  const fs::path p = temp_file("keep_head.json");
  common::write_file_atomic(p, R"({"card": "two GPUs", "complete": true, "rows": [{"k": "ep2", "v": 1}]})");
  ResultsFile f(p.string(), {{"one_gpu_card", "one GPU"}});
  f.keep_other_rows([](const nlohmann::json& r) { return r.value("k", ""); }, true);
  f.add({{"k", "ep1"}, {"v", 2}});
  f.write();
  auto j = read_json(p);
  EXPECT_EQ(j["card"], "two GPUs");
  EXPECT_EQ(j["one_gpu_card"], "one GPU");
  EXPECT_EQ(j["complete"], true);
  ASSERT_EQ(j["rows"].size(), 2u);
  // Without keep_head the other run's head is gone.
  ResultsFile g(p.string(), {{"one_gpu_card", "one GPU"}});
  g.keep_other_rows([](const nlohmann::json& r) { return r.value("k", ""); });
  g.write();
  j = read_json(p);
  EXPECT_FALSE(j.contains("card"));
  EXPECT_EQ(j["rows"].size(), 2u);
}

TEST(BenchReport, StatusKeysTakeThePrefix) {
  const fs::path p = temp_file("prefix.json");
  Report report(Table({{"x", 3}}), ResultsFile(p.string(), {{"complete", "the other run's"}}), 2);
  report.status_prefix("one_gpu_");
  Row r;
  r.config = {{"x", 1}};
  r.cells = {1LL};
  r.check.ok = true;
  report.add(r);
  const auto j = read_json(p);
  EXPECT_EQ(j["complete"], "the other run's");
  EXPECT_EQ(j["one_gpu_complete"], false);
  EXPECT_EQ(j["one_gpu_rows_planned"], 2);
  EXPECT_EQ(j["one_gpu_all_correct"], true);
}

TEST(BenchReport, WritesAfterEveryRowAndMarksWrongRows) {
  const fs::path p = temp_file("report.json");
  Report report(Table({{"x", 3}, {"ms", 6, ".2f"}}), ResultsFile(p.string(), run_head("card", 1, "cmd")), 2);
  Row good;
  good.config = {{"x", 1}};
  good.values = {{"ms", 0.5}};
  good.cells = {1LL, 0.5};
  good.check = {true, ""};
  testing::internal::CaptureStdout();
  report.add(good);
  auto j = read_json(p);
  EXPECT_FALSE(j["complete"]);
  EXPECT_EQ(j["rows_planned"], 2);
  EXPECT_TRUE(j["all_correct"]);
  EXPECT_EQ(j["rows"][0]["correct"], true);
  EXPECT_EQ(j["rows"][0]["ms"], 0.5);
  Row wrong = good;
  wrong.check = {false, "bits differ"};
  report.add(wrong);
  report.finish();
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("  1   0.50  WRONG: bits differ\n"), std::string::npos) << out;
  j = read_json(p);
  EXPECT_TRUE(j["complete"]);
  EXPECT_FALSE(j["all_correct"]);
  EXPECT_FALSE(report.all_correct());
  EXPECT_EQ(j["rows"][1]["correct"], false);
}

TEST(BenchHelpers, GeomeanAndBudget) {
  EXPECT_DOUBLE_EQ(geomean({}), 1.0);
  EXPECT_NEAR(geomean({2.0, 8.0}), 4.0, 1e-12);
  EXPECT_FALSE(Budget(0).spent());
  EXPECT_THROW(Budget(-1), std::exception);
  EXPECT_EQ(today_utc().size(), 10u);
}

// `xstage bench moe --only/--ep/--tokens/--routing`: the rows they keep, in sweep order.
TEST(MoeBenchRows, FiltersKeepTheListedValues) {
  using xstage::moe::select_rows;
  EXPECT_EQ(select_rows("quick", {}).size(), 8u);
  const auto two = select_rows("quick", {.ep = {2}, .routing = {"skewed"}});
  ASSERT_EQ(two.size(), 2u);
  for (const auto& c : two) {
    EXPECT_EQ(c.ep, 2);
    EXPECT_EQ(c.routing, "skewed");
  }
  const auto one = select_rows("quick", {.only = 3});
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].tokens_per_rank, xstage::moe::bench_sweep("quick")[3].tokens_per_rank);
  EXPECT_THROW(select_rows("quick", {.only = 8}), std::exception);
  EXPECT_THROW(select_rows("quick", {.tokens = {7}}), std::exception);
  // A routing outside the default sweep makes its own rows, in sweep order; --only indexes the default sweep.
  const auto both = select_rows("quick", {.ep = {4}, .routing = {"uniform", "balanced"}});
  ASSERT_EQ(both.size(), 4u);
  EXPECT_EQ(both[0].routing, "uniform");
  EXPECT_EQ(both[2].routing, "balanced");
  EXPECT_EQ(both[2].tokens_per_rank, both[0].tokens_per_rank);
  EXPECT_THROW(select_rows("quick", {.only = 0, .routing = {"balanced"}}), std::exception);
}
