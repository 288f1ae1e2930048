// The results file and a sweep's report (xstage/bench/report.hpp).
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>

#include "common/check.hpp"
#include "common/files.hpp"
#include "common/progress.hpp"
#include "xstage/bench/report.hpp"

namespace xstage::bench {

nlohmann::json Row::json() const {
  nlohmann::json j = config.is_object() ? config : nlohmann::json::object();
  if (values.is_object()) j.update(values);
  j["correct"] = check.ok;
  return j;
}

nlohmann::json read_json_file(const std::filesystem::path& p) {
  try {
    return nlohmann::json::parse(common::read_file(p));
  } catch (const nlohmann::json::exception& e) {
    throw common::Error(fmt::format("{}: malformed JSON ({})", p.string(), e.what()));
  }
}

std::string today_utc() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&t));
  return buf;
}

nlohmann::json run_head(const std::string& card, int gpus, const std::string& command) {
  return {{"card", card}, {"gpus", gpus}, {"date", today_utc()}, {"command", command}};
}

void ResultsFile::keep_other_rows(Key key, bool keep_head) {
  key_ = std::move(key);
  kept_.clear();
  if (path_.empty() || !std::filesystem::exists(path_)) return;
  nlohmann::json old;
  try {
    old = nlohmann::json::parse(common::read_file(path_));
  } catch (const nlohmann::json::exception& e) {
    XS_FAIL("{} exists but is not JSON ({}); remove it or pick another --json", path_, e.what());
  }
  XS_ASSERT(old.is_object() && old.contains("rows") && old["rows"].is_array(),
            "{} exists but has no \"rows\" array; remove it or pick another --json", path_);
  for (const auto& r : old["rows"]) kept_.push_back(r);
  if (keep_head)
    for (const auto& [k, v] : old.items())
      if (k != "rows" && !head_.contains(k)) head_[k] = v;
}

std::size_t ResultsFile::rows_written() const {
  std::size_t n = rows_.size();
  for (const auto& k : kept_) {
    bool replaced = false;
    for (const auto& r : rows_) replaced = replaced || key_(k) == key_(r);
    n += !replaced;
  }
  return n;
}

void ResultsFile::write() const {
  if (path_.empty()) return;
  nlohmann::json out = head_;
  out["rows"] = nlohmann::json::array();
  for (const auto& k : kept_) {
    bool replaced = false;
    for (const auto& r : rows_) replaced = replaced || key_(k) == key_(r);
    if (!replaced) out["rows"].push_back(k);
  }
  for (const auto& r : rows_) out["rows"].push_back(r);
  common::write_file_atomic(path_, out.dump(2) + "\n");
}

Report::Report(Table table, ResultsFile file, std::size_t planned, const std::string& progress)
    : table_(std::move(table)), file_(std::move(file)), planned_(planned) {
  if (!progress.empty()) progress_ = std::make_unique<common::ProgressBar>(progress, planned);
}

Report::~Report() = default;

void Report::print_header(bool rule) const {
  const std::string h = table_.header();
  std::printf("%s\n", h.c_str());
  if (rule) std::printf("%s\n", std::string(h.size(), '-').c_str());
  std::fflush(stdout);
}

void Report::add(const Row& row) {
  if (progress_) progress_->tick();
  std::string line = table_.line(row.cells);
  if (!row.check.ok) line += "  WRONG" + (row.check.detail.empty() ? "" : ": " + row.check.detail);
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  all_correct_ = all_correct_ && row.check.ok;
  file_.add(row.json());
  write();
}

void Report::write() {
  file_.set(status_prefix_ + "rows_planned", planned_);
  file_.set(status_prefix_ + "complete", file_.rows() == planned_);
  file_.set(status_prefix_ + "all_correct", all_correct_);
  file_.write();
}

void Report::finish() {
  if (progress_) progress_->finish();
  write();
  if (!file_.path().empty()) std::printf("wrote %s\n", file_.path().c_str());
}

Budget::Budget(double seconds) : seconds_(seconds), t0_(std::chrono::steady_clock::now()) {
  XS_ASSERT(seconds >= 0, "--budget-s must be >= 0 (got {})", seconds);
}

bool Budget::spent() const {
  return seconds_ > 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count() > seconds_;
}

double geomean(const std::vector<double>& v) {
  double lg = 0;
  for (double x : v) lg += std::log(x);
  return v.empty() ? 1.0 : std::exp(lg / double(v.size()));
}

}  // namespace xstage::bench
