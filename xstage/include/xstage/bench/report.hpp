// The one bench harness (host part; library xs_bench). Every `xstage bench ...` and
// `xstage dit` reports through it:
//
//   Row         one configuration: its keys, its measured values, its table cells and
//               its Check against a reference run in the same loop;
//   Table       the console table: one printer for every bench (fmt);
//   ResultsFile the JSON results file (nlohmann-json), written atomically
//               (common::write_file_atomic) after every row, so a run cut short
//               (a budget, a kill) keeps the rows it measured;
//   Report      a sweep's table and results file together: it prints each row, marks
//               a row whose check failed ("WRONG ..." on the line, "correct": false
//               in the JSON) and keeps the head's "complete", "rows_planned" and
//               "all_correct" up to date.
//
// Timing is not here: bench/timing.hpp (the sampling policy) and bench/event_timer.hpp
// (CUDA events) are header-only, so the LibTorch baselines use them too.
#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace common {
class ProgressBar;
}

namespace xstage::bench {

// ---- a row -------------------------------------------------------------------------

// A row's correctness, from a reference run in the same loop (bitwise for data
// movement, a tolerance fitted to the operation for math).
struct Check {
  bool ok = false;
  std::string detail;  // what differed, printed after "WRONG" when !ok
};

// A table cell: nothing (printed "-"), an integer, a number (the column's spec) or text.
using Cell = std::variant<std::monostate, long long, double, std::string>;
inline Cell cell(const std::optional<double>& v) { return v ? Cell(*v) : Cell(); }
inline nlohmann::json json_or_null(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(); }

struct Row {
  nlohmann::json config;    // the configuration's keys (the JSON row's leading keys)
  nlohmann::json values;    // what was measured (further keys of the JSON row)
  std::vector<Cell> cells;  // the table line
  Check check;
  // config, values and "correct": check.ok.
  nlohmann::json json() const;
};

// ---- the table ---------------------------------------------------------------------

struct Column {
  std::string head;
  int width = 0;      // minimum width (0: as wide as the text)
  std::string spec;   // fmt spec of a number without the width (".3f", ".2e", ".4g"); integers and text as they are
  bool left = false;  // left-aligned (else right)
  bool group = false; // "| " before the column: a new group of the table
};

class Table {
 public:
  Table() = default;
  explicit Table(std::vector<Column> columns) : columns_(std::move(columns)) {}
  Table& add(Column c);
  std::string header() const;                         // the headings, no newline
  std::string line(const std::vector<Cell>& cells) const;  // throws when the count differs
  std::size_t size() const { return columns_.size(); }

 private:
  std::string join(const std::vector<std::string>& texts) const;
  std::vector<Column> columns_;
};

// ---- the results file --------------------------------------------------------------

// The head of every results file: card, gpus, date (today, UTC) and the command line.
nlohmann::json run_head(const std::string& card, int gpus, const std::string& command);
std::string today_utc();  // YYYY-MM-DD
// A JSON file the user gives (results, baselines); a malformed one throws one line naming it.
nlohmann::json read_json_file(const std::filesystem::path& path);

// head + "rows", written to `path` (empty: nowhere) on every write(). With a key
// (keep_other_rows), the rows of an existing file are kept, except those whose key
// equals a new row's: files that collect rows from many runs (docs/results/dit.json).
class ResultsFile {
 public:
  using Key = std::function<std::string(const nlohmann::json& row)>;
  ResultsFile(std::string path, nlohmann::json head) : path_(std::move(path)), head_(std::move(head)) {}
  // Reads the existing file now; throws when it is not a results file. keep_head: its
  // top-level keys that this head does not set stay too (a file whose rows come from
  // runs of different kinds, each with its own keys: docs/results/moe.json's one_gpu_*).
  void keep_other_rows(Key key, bool keep_head = false);
  void set(const std::string& key, nlohmann::json value) { head_[key] = std::move(value); }
  void add(nlohmann::json row) { rows_.push_back(std::move(row)); }
  void write() const;
  const std::string& path() const { return path_; }
  std::size_t rows() const { return rows_.size(); }
  std::size_t rows_written() const;  // kept rows too

 private:
  std::string path_;
  nlohmann::json head_;
  std::vector<nlohmann::json> rows_, kept_;
  Key key_;
};

// ---- a sweep's report ----------------------------------------------------------------

class Report {
 public:
  // `planned`: rows the sweep means to run; progress: a progress bar's label (empty: none).
  Report(Table table, ResultsFile file, std::size_t planned, const std::string& progress = "");
  ~Report();
  Report(const Report&) = delete;
  Report& operator=(const Report&) = delete;

  void print_header(bool rule = false) const;  // the headings (and a rule of dashes under them)
  // Prints the row's line ("  WRONG[: detail]" after it when its check failed), adds its
  // JSON and rewrites the results file.
  void add(const Row& row);
  void set(const std::string& key, nlohmann::json value) { file_.set(key, std::move(value)); }
  // Prefix of the status keys (rows_planned, complete, all_correct) in the head, for a
  // report that adds its rows to a file whose other rows have their own status.
  void status_prefix(std::string prefix) { status_prefix_ = std::move(prefix); }
  // The last write (after set()s of summaries); prints "wrote PATH" when there is a file.
  void finish();
  std::size_t rows() const { return file_.rows(); }
  std::size_t planned() const { return planned_; }
  bool all_correct() const { return all_correct_; }
  const std::string& path() const { return file_.path(); }

 private:
  void write();
  Table table_;
  ResultsFile file_;
  std::size_t planned_;
  bool all_correct_ = true;
  std::string status_prefix_;
  std::unique_ptr<common::ProgressBar> progress_;
};

// ---- helpers ---------------------------------------------------------------------

// Stops a sweep from starting rows after `seconds` (0: never).
class Budget {
 public:
  explicit Budget(double seconds);
  bool spent() const;

 private:
  double seconds_;
  std::chrono::steady_clock::time_point t0_;
};

double geomean(const std::vector<double>& v);  // 1 for none

}  // namespace xstage::bench
