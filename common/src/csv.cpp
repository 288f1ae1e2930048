#include "common/csv.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "common/check.hpp"
#include "common/files.hpp"

namespace common {

namespace {
std::string trim(const std::string& s) {
  std::size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r')) --e;
  return s.substr(b, e - b);
}
}  // namespace

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : line) {
    if (c == ',') {
      out.push_back(trim(cur));
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  out.push_back(trim(cur));
  return out;
}

// Through read_file, so a folder or an unreadable path is named as such, not read as
// an empty table.
CsvTable CsvTable::read(const std::filesystem::path& path) { return parse(read_file(path), path.string()); }

CsvTable CsvTable::parse(const std::string& text, const std::string& source_name) {
  CsvTable t;
  t.source_ = source_name;
  std::istringstream in(text);
  std::string line;
  std::size_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    const std::string stripped = trim(line);
    if (stripped.empty() || stripped[0] == '#') continue;
    if (line.find('"') != std::string::npos)
      throw Error(fmt::format("{}:{}: quoted CSV fields are not supported", source_name, lineno));
    auto fields = split_csv_line(line);
    if (t.header_.empty()) {
      for (std::size_t i = 0; i < fields.size(); ++i) {
        if (fields[i].empty())
          throw Error(fmt::format("{}:{}: empty column name at position {}", source_name, lineno, i + 1));
        for (std::size_t j = 0; j < i; ++j)
          if (fields[j] == fields[i])
            throw Error(fmt::format("{}:{}: duplicate column '{}'", source_name, lineno, fields[i]));
      }
      t.header_ = std::move(fields);
      continue;
    }
    if (fields.size() != t.header_.size())
      throw Error(fmt::format("{}:{}: {} fields, header has {}", source_name, lineno, fields.size(),
                              t.header_.size()));
    t.cells_.push_back(std::move(fields));
    t.line_of_row_.push_back(lineno);
  }
  if (t.header_.empty()) throw Error(fmt::format("{}: empty CSV (no header)", source_name));
  return t;
}

std::optional<std::size_t> CsvTable::find(const std::string& name) const {
  for (std::size_t i = 0; i < header_.size(); ++i)
    if (header_[i] == name) return i;
  return std::nullopt;
}

std::size_t CsvTable::column(const std::string& name) const {
  auto i = find(name);
  if (!i) throw Error(fmt::format("{}: missing column '{}'", source_, name));
  return *i;
}

double CsvTable::number(std::size_t row, std::size_t col) const {
  const std::string& s = cell(row, col);
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || errno == ERANGE || !std::isfinite(v))
    throw Error(fmt::format("{}:{}: column '{}': '{}' is not a finite number", source_, line_of_row_[row],
                            header_[col], s));
  return v;
}

long long CsvTable::integer(std::size_t row, std::size_t col) const {
  const std::string& s = cell(row, col);
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || end != s.c_str() + s.size() || errno == ERANGE)
    throw Error(fmt::format("{}:{}: column '{}': '{}' is not an integer", source_, line_of_row_[row],
                            header_[col], s));
  return v;
}

}  // namespace common
