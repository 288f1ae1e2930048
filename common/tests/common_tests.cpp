#include <gtest/gtest.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <optional>
#include <chrono>
#include <filesystem>
#include <random>
#include <thread>

#include <unistd.h>

#include "common/check.hpp"
#include "common/csv.hpp"
#include "common/files.hpp"
#include "common/testing.hpp"
#include "common/parallel.hpp"
#include "common/png.hpp"
#include "common/progress.hpp"
#include "common/stats.hpp"
#include "common/validate.hpp"

namespace fs = std::filesystem;

TEST(Parallel, EveryIndexOnceAndTheFirstErrorRethrown) {
  EXPECT_EQ(common::worker_count(3, 100), 3);
  EXPECT_EQ(common::worker_count(8, 2), 2);
  EXPECT_EQ(common::worker_count(4, 0), 1);
  EXPECT_GE(common::worker_count(0, 1000), 1);
  for (int threads : {1, 3, 0}) {
    std::vector<std::atomic<int>> hits(1000);
    common::parallel_for(hits.size(), threads, [&](std::size_t i) { ++hits[i]; });
    for (const auto& h : hits) ASSERT_EQ(h.load(), 1) << threads;
  }
  common::parallel_for(0, 4, [](std::size_t) { FAIL() << "no items: never called"; });
  // On one thread the error stops the loop right after the failing item.
  std::atomic<int> calls{0};
  try {
    common::parallel_for(100000, 1, [&](std::size_t i) {
      ++calls;
      if (i == 10) throw common::Error("item 10 failed");
    });
    FAIL() << "expected the item's error";
  } catch (const common::Error& e) {
    EXPECT_STREQ(e.what(), "item 10 failed");
  }
  EXPECT_EQ(calls.load(), 11);
  // On several threads the others stop soon after: every other item takes 0.2 ms, so
  // running all 10,000 would take 0.5 s on 4 threads, far longer than the failing
  // thread needs to be scheduled, even on a loaded 2-core machine (with instant items
  // the other threads could finish all of them before it runs: this test was flaky so).
  calls = 0;
  try {
    common::parallel_for(10000, 4, [&](std::size_t i) {
      ++calls;
      if (i == 10) throw common::Error("item 10 failed");
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    });
    FAIL() << "expected the item's error";
  } catch (const common::Error& e) {
    EXPECT_STREQ(e.what(), "item 10 failed");
  }
  EXPECT_LT(calls.load(), 10000);  // stopped early
}

// Off a terminal (a CI log) the bar prints whole lines, every 10 s and once when it
// finishes (with the status), however many ticks race to the end; a disabled bar prints
// nothing. Ticks from several threads all count.
TEST(ProgressBar, LogLinesCountEveryTickAndCarryTheStatus) {
  testing::internal::CaptureStderr();
  {
    common::ProgressBar bar("work", 400);
    std::vector<std::thread> workers;
    for (int t = 0; t < 4; ++t)
      workers.emplace_back([&] {
        for (int i = 0; i < 100; ++i) bar.tick();
      });
    for (auto& w : workers) w.join();
    EXPECT_EQ(bar.done(), 400u);
    bar.set_status("loss 0.31");
  }  // the destructor finishes the line
  {
    common::ProgressBar quiet("quiet", 3, false);
    quiet.tick(3);
  }
  const std::string err = testing::internal::GetCapturedStderr();
  const std::string full = "work [" + std::string(28, '#') + "] 400/400 100% ";
  EXPECT_EQ(err.find(full), 0u) << err;
  EXPECT_NE(err.find("s  loss 0.31\n"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_EQ(err.find("quiet"), std::string::npos) << err;
  EXPECT_EQ(err.find('\r'), std::string::npos) << err;
}

TEST(Stats, QuantileInterpolatesBetweenRanks) {
  std::vector<double> xs{4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(common::median(xs), 2.5);
  EXPECT_DOUBLE_EQ(common::quantile(xs, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(common::quantile(xs, 1.0), 4.0);
  EXPECT_DOUBLE_EQ(common::quantile(xs, 1.0 / 3.0), 2.0);
  EXPECT_THROW(common::median(std::vector<double>{}), common::Error);
  EXPECT_THROW(common::quantile(xs, 1.5), common::Error);
}

TEST(Stats, MedianAbsRelError) {
  std::vector<double> p{1.1, 2.0, 2.4}, m{1.0, 2.0, 3.0};
  EXPECT_NEAR(common::median_abs_rel_error(p, m), 0.1, 1e-12);
}

TEST(Csv, ParsesAndReportsLineOfBadNumber) {
  auto t = common::CsvTable::parse("a,b\n1,2.5\n# comment\n3,x\n", "t.csv");
  ASSERT_EQ(t.rows(), 2u);
  EXPECT_DOUBLE_EQ(t.number(0, t.column("b")), 2.5);
  try {
    t.number(1, 1);
    FAIL() << "expected an error";
  } catch (const common::Error& e) {
    EXPECT_NE(std::string(e.what()).find("t.csv:4"), std::string::npos) << e.what();
  }
  EXPECT_THROW(t.column("zz"), common::Error);
}

TEST(Csv, RejectsRaggedRowsAndEmptyFiles) {
  EXPECT_THROW(common::CsvTable::parse("a,b\n1\n", "r.csv"), common::Error);
  EXPECT_THROW(common::CsvTable::parse("", "e.csv"), common::Error);
  EXPECT_THROW(common::CsvTable::parse("a,a\n", "d.csv"), common::Error);
  EXPECT_THROW(common::CsvTable::read("/nonexistent/x.csv"), common::Error);
  auto t = common::CsvTable::parse("a\nnan\ninf\n", "n.csv");
  EXPECT_THROW(t.number(0, 0), common::Error);
  EXPECT_THROW(t.number(1, 0), common::Error);
}

TEST(Units, ParseBytesAndDurations) {
  EXPECT_EQ(common::parse_bytes("16KiB", "--burst"), 16384u);
  EXPECT_EQ(common::parse_bytes("16 k", "--burst"), 16384u);
  EXPECT_EQ(common::parse_bytes("2MiB", "--burst"), 2u << 20);
  EXPECT_EQ(common::parse_bytes("1000", "--burst"), 1000u);
  EXPECT_THROW(common::parse_bytes("-4KiB", "--burst"), common::Error);
  EXPECT_THROW(common::parse_bytes("abc", "--burst"), common::Error);
  EXPECT_THROW(common::parse_bytes("4 parsecs", "--burst"), common::Error);
  EXPECT_THROW(common::parse_bytes("0.5", "--burst"), common::Error);
  EXPECT_DOUBLE_EQ(common::parse_duration_ns("2us", "--gap"), 2000.0);
  EXPECT_DOUBLE_EQ(common::parse_duration_ns("1.5ms", "--gap"), 1.5e6);
  EXPECT_DOUBLE_EQ(common::parse_duration_ns("0", "--gap"), 0.0);
  EXPECT_THROW(common::parse_duration_ns("5", "--gap"), common::Error);
  EXPECT_THROW(common::parse_duration_ns("-1us", "--gap"), common::Error);
  // As --burst 1e30 is refused, so is a gap that overflows the model's arithmetic.
  EXPECT_EQ(common::error_of([] { common::parse_duration_ns("1e30s", "--gap"); }),
            "--gap: '1e30s' is too long (at most 1e18 ns)");
}

TEST(Files, AtomicWriteReplacesWholeFile) {
  const fs::path dir = fs::temp_directory_path() / "xs_common_files";
  fs::remove_all(dir);
  const fs::path p = dir / "sub" / "a.txt";
  common::write_file_atomic(p, "first version, long");
  common::write_file_atomic(p, "second");
  EXPECT_EQ(common::read_file(p), "second");
  size_t entries = 0;
  for (auto& e : fs::directory_iterator(p.parent_path())) (void)e, ++entries;
  EXPECT_EQ(entries, 1u);  // no temp file left behind
  fs::remove_all(dir);
}

TEST(Files, SortedSubfoldersListsFoldersOnly) {
  const fs::path d = fs::temp_directory_path() / ("xs_subfolders_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d / "b");
  fs::create_directories(d / "a" / "inner");
  common::write_file_atomic(d / "c.txt", "x");
  EXPECT_EQ(common::sorted_subfolders(d), (std::vector<fs::path>{d / "a", d / "b"}));
  EXPECT_TRUE(common::sorted_subfolders(d / "missing").empty());
  fs::remove_all(d);
}

TEST(Files, OutputPathCheckedBeforeALongRun) {
  const fs::path dir = fs::temp_directory_path() / "xs_common_outcheck";
  fs::remove_all(dir);
  fs::create_directories(dir);
  common::write_file_atomic(dir / "afile", "x");
  auto message = [](const fs::path& p) { return common::error_of([&] { common::check_output_path(p, "--json"); }); };
  EXPECT_EQ(message(dir / "out.json"), "");
  EXPECT_EQ(message(dir / "new" / "deeper" / "out.json"), "") << "missing directories are created later";
  EXPECT_EQ(message("relative.json"), "");
  EXPECT_NE(message(dir).find("is a directory"), std::string::npos) << message(dir);
  EXPECT_NE(message(dir / "afile" / "out.json").find("afile is not a directory"), std::string::npos)
      << message(dir / "afile" / "out.json");
  EXPECT_NE(message(dir / "afile" / "sub" / "out.json").find("afile is not a directory"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "new")) << "the check creates nothing";
  fs::remove_all(dir);
}

TEST(Files, OutputDirCheckedBeforeALongRun) {
  const fs::path dir = fs::temp_directory_path() / "xs_common_dircheck";
  fs::remove_all(dir);
  fs::create_directories(dir / "folder");
  common::write_file_atomic(dir / "afile", "x");
  auto message = [](const fs::path& p) { return common::error_of([&] { common::check_output_dir(p, "--out"); }); };
  EXPECT_EQ(message(dir / "folder"), "") << "an existing folder is fine";
  EXPECT_EQ(message(dir / "new" / "deeper"), "") << "missing folders are created later";
  EXPECT_EQ(message("relative-run"), "");
  EXPECT_NE(message(dir / "afile").find("afile is not a directory"), std::string::npos) << message(dir / "afile");
  EXPECT_NE(message(dir / "afile" / "sub").find("afile is not a directory"), std::string::npos);
  EXPECT_NE(message("").find("empty path"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "new")) << "the check creates nothing";
  fs::remove_all(dir);
}

TEST(Png, RoundTripGrayAndRgb) {
  std::mt19937 rng(7);
  for (int ch : {1, 3}) {
    auto img = common::Image::blank(37, 21, ch);
    for (auto& v : img.pixels) v = static_cast<std::uint8_t>(rng());
    auto bytes = common::encode_png(img);
    auto back = common::decode_png(bytes.data(), bytes.size(), ch, "mem");
    EXPECT_EQ(back.width, 37);
    EXPECT_EQ(back.height, 21);
    EXPECT_EQ(back.pixels, img.pixels);
  }
}

TEST(Png, CorruptAndTruncatedInputsThrow) {
  auto img = common::Image::blank(64, 64, 1, 200);
  auto bytes = common::encode_png(img);
  for (std::size_t cut : {std::size_t{4}, std::size_t{20}, bytes.size() / 2, bytes.size() - 1}) {
    EXPECT_THROW(common::decode_png(bytes.data(), cut, 1, "cut"), common::Error) << cut;
  }
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    auto bad = bytes;
    for (int k = 0; k < 4; ++k) bad[8 + rng() % (bad.size() - 8)] ^= static_cast<std::uint8_t>(1 + rng() % 255);
    try {
      auto out = common::decode_png(bad.data(), bad.size(), 1, "fuzz");
      EXPECT_EQ(out.pixels.size(), static_cast<std::size_t>(out.width) * out.height);
    } catch (const common::Error&) {
    }
  }
}

// ---------------------------------------------------------------- validation layer

TEST(Validate, NumbersAreRefusedWithTheirUnit) {
  using common::error_of;
  namespace v = common::validate;
  EXPECT_EQ(error_of([] { v::in_range(4, 1, 8, "--threads", "threads"); }), "");
  EXPECT_EQ(error_of([] { v::in_range(0, 1, 8, "--threads", "threads"); }),
            "--threads: 0 threads is out of range (1 .. 8 threads)");
  EXPECT_EQ(error_of([] { v::at_least(-1, 0, "--max-minutes", "minutes"); }),
            "--max-minutes: -1 minutes is below the minimum 0 minutes");
  EXPECT_EQ(error_of([] { v::at_least(std::nan(""), 0, "lr", ""); }), "lr: nan is not finite");
  EXPECT_EQ(error_of([] { v::finite(HUGE_VAL, "t0", "ns/B"); }), "t0: inf ns/B is not finite");
}

TEST(Validate, CliOptionsAreCheckedAtParseTimeAndEmptyMeansTheConfig) {
  auto parse = [](std::vector<std::string> args, std::optional<int>& threads) {
    CLI::App app;
    app.add_option("--threads", threads)->check(common::validate::min(0, "threads", "0: all cores"));
    std::reverse(args.begin(), args.end());
    try {
      app.parse(args);
    } catch (const CLI::ParseError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  std::optional<int> threads;
  EXPECT_EQ(parse({}, threads), "");
  EXPECT_FALSE(threads.has_value()) << "not given: the config's value, not a magic number";
  EXPECT_EQ(parse({"--threads", "0"}, threads), "");
  EXPECT_EQ(threads, 0);
  EXPECT_EQ(parse({"--threads", "-3"}, threads), "--threads: -3 threads is below the minimum 0 threads (0: all cores)");
  EXPECT_NE(parse({"--threads", "many"}, threads).find("'many' is not a number"), std::string::npos);
}

TEST(Validate, FilesAndFoldersSayWhatTheyAre) {
  using common::error_of;
  const fs::path dir = fs::temp_directory_path() / "xs_common_validate_files";
  fs::remove_all(dir);
  fs::create_directories(dir / "folder.csv");
  common::write_file_atomic(dir / "a.json", "{}");
  EXPECT_EQ(error_of([&] { common::validate::file(dir / "a.json", "--config"); }), "");
  EXPECT_EQ(error_of([&] { common::validate::file(dir / "folder.csv", "--sweep"); }),
            fmt::format("--sweep {}: is a folder, not a file", (dir / "folder.csv").string()));
  EXPECT_NE(error_of([&] { common::validate::file(dir / "nope", ""); }).find("no such file"), std::string::npos);
  EXPECT_NE(error_of([&] { common::validate::folder(dir / "a.json", "--data"); }).find("is a file, not a folder"),
            std::string::npos);
  // Every reader goes through read_file: a folder is named as such, not read as an empty file.
  EXPECT_NE(error_of([&] { common::read_file(dir / "folder.csv"); }).find("is a folder, not a file"), std::string::npos);
  fs::remove_all(dir);
}

TEST(Validate, TablesNeedTheirColumnsAndFiniteCells) {
  using common::error_of;
  const auto t = common::CsvTable::parse("a,b\n1,2\n3,nan\n", "t.csv");
  EXPECT_EQ(error_of([&] { common::validate::columns(t, {"a", "b"}); }), "");
  EXPECT_EQ(error_of([&] { common::validate::columns(t, {"a", "issue_ns_mean"}); }),
            "t.csv: missing column 'issue_ns_mean' (it has: a, b)");
  EXPECT_EQ(error_of([&] { common::validate::finite_cells(t, {"a"}); }), "");
  EXPECT_EQ(error_of([&] { common::validate::finite_cells(t, {"b"}); }),
            "t.csv:3: column 'b': 'nan' is not a finite number");
}

TEST(Validate, ArraysAndSets) {
  using common::error_of;
  const std::vector<float> rows = {1, 2, 3, 4, NAN, 6};
  EXPECT_EQ(common::validate::first_non_finite(std::span<const float>(rows)), 4u);
  EXPECT_EQ(error_of([&] {
              common::validate::finite_rows(rows, 3, "emb.npy", [](std::size_t r) { return fmt::format("row {}", r + 1); });
            }),
            "emb.npy: row 2: value 2 of 3 is nan (non-finite values are refused)");
  const std::vector<int> views = {0, 90, 18, 90};
  EXPECT_EQ(error_of([&] { common::validate::unique<int>(views, "--views"); }),
            "--views: 90 is given twice (items 2 and 4)");
  const std::vector<int> fine = {0, 18, 90};
  EXPECT_EQ(error_of([&] { common::validate::unique<int>(fine, "--views"); }), "");
}

// ---------------------------------------------------------------- outputs written only on success

namespace {

// Every file below `dir` with its bytes, to compare before and after.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    out[e.path().lexically_relative(dir).string()] = e.is_regular_file() ? common::read_file(e.path()) : "<dir>";
  return out;
}

}  // namespace

// remove_tree removes a nested tree, removes a symbolic link without following it, and
// takes a path that does not exist as done.
TEST(RemoveTree, RemovesTheTreeNotWhatLinksPointTo) {
  const fs::path root = fs::temp_directory_path() / "xs_common_remove_tree";
  fs::remove_all(root);
  common::write_file_atomic(root / "tree" / "a" / "b" / "file.txt", "x");
  common::write_file_atomic(root / "tree" / "top.txt", "y");
  common::write_file_atomic(root / "outside" / "kept.txt", "z");
  fs::create_directory_symlink(root / "outside", root / "tree" / "a" / "link");
  std::error_code ec;
  common::remove_tree(root / "tree", ec);
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_FALSE(fs::exists(root / "tree"));
  EXPECT_EQ(common::read_file(root / "outside" / "kept.txt"), "z");
  common::remove_tree(root / "tree", ec);  // gone already
  EXPECT_FALSE(ec) << ec.message();
  common::remove_tree(root / "outside" / "kept.txt", ec);  // a plain file
  EXPECT_FALSE(ec);
  EXPECT_FALSE(fs::exists(root / "outside" / "kept.txt"));
  fs::remove_all(root);
}

TEST(OutputStage, AFailedCommandLeavesTheTargetByteForByte) {
  const fs::path root = fs::temp_directory_path() / "xs_common_stage";
  fs::remove_all(root);
  const fs::path target = root / "out";
  common::write_file_atomic(target / "keep.json", "old");
  common::write_file_atomic(target / "sub" / "a.csv", "old a");
  const auto before = snapshot(root);
  {
    common::OutputStage stage(target);
    common::write_file_atomic(stage.dir() / "keep.json", "new");
    common::write_file_atomic(stage.dir() / "sub" / "b.csv", "new b");
    // no commit: the command failed
  }
  EXPECT_EQ(snapshot(root), before) << "target untouched and no stage left beside it";
  {
    common::OutputStage stage(root / "deep" / "er" / "new");
    common::write_file_atomic(stage.dir() / "x", "x");
  }
  EXPECT_FALSE(fs::exists(root / "deep")) << "folders made for the stage go with it";
  fs::remove_all(root);
}

TEST(OutputStage, CommitMergesOrReplaces) {
  const fs::path root = fs::temp_directory_path() / "xs_common_stage_commit";
  fs::remove_all(root);
  {
    common::OutputStage stage(root / "fresh");
    common::write_file_atomic(stage.dir() / "a" / "b.txt", "b");
    stage.commit();
  }
  EXPECT_EQ(common::read_file(root / "fresh" / "a" / "b.txt"), "b");
  common::write_file_atomic(root / "t" / "data" / "old.png", "old");
  common::write_file_atomic(root / "t" / "other.txt", "other");
  {
    common::OutputStage stage(root / "t");  // merge: new files join, others stay
    common::write_file_atomic(stage.dir() / "data" / "new.png", "new");
    stage.commit();
  }
  EXPECT_TRUE(fs::exists(root / "t" / "data" / "old.png"));
  EXPECT_EQ(common::read_file(root / "t" / "data" / "new.png"), "new");
  {
    common::OutputStage stage(root / "t", common::OutputStage::Mode::replace);  // a regenerated folder
    common::write_file_atomic(stage.dir() / "data" / "only.png", "only");
    stage.commit();
  }
  EXPECT_FALSE(fs::exists(root / "t" / "data" / "old.png"));
  EXPECT_TRUE(fs::exists(root / "t" / "data" / "only.png"));
  EXPECT_EQ(common::read_file(root / "t" / "other.txt"), "other");
  std::size_t entries = 0;
  for (const auto& e : fs::directory_iterator(root)) entries += e.path().filename().string().front() == '.';
  EXPECT_EQ(entries, 0u) << "no stage left";
  fs::remove_all(root);
}

TEST(Files, FilesThatBelongTogetherAreWrittenAllOrNothing) {
  const fs::path dir = fs::temp_directory_path() / "xs_common_pair";
  fs::remove_all(dir);
  fs::create_directories(dir / "b.csv");  // the second output cannot be written
  EXPECT_THROW(common::write_files_atomic({{dir / "a.npy", "a"}, {dir / "b.csv", "b"}}), common::Error);
  EXPECT_FALSE(fs::exists(dir / "a.npy")) << "the first file waits for the second";
  common::write_files_atomic({{dir / "a.npy", "a"}, {dir / "c.csv", "c"}});
  EXPECT_EQ(common::read_file(dir / "a.npy"), "a");
  EXPECT_EQ(common::read_file(dir / "c.csv"), "c");
  fs::remove_all(dir);
}
