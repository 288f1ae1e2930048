// A small, strict CSV table: a header row, then rows of the same width.
// Numeric access reports the file, line and column on any parse error.
// Quoting is not supported (our files never need it); a quote character is an error.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace common {

class CsvTable {
 public:
  // Throws common::Error naming the file on: unreadable file, empty file,
  // duplicate header names, a row whose width differs from the header's.
  static CsvTable read(const std::filesystem::path& path);
  static CsvTable parse(const std::string& text, const std::string& source_name);

  const std::vector<std::string>& header() const { return header_; }
  std::size_t rows() const { return cells_.size(); }
  bool has_column(const std::string& name) const { return find(name).has_value(); }
  // Throws if the column is missing.
  std::size_t column(const std::string& name) const;
  const std::string& cell(std::size_t row, std::size_t col) const { return cells_.at(row).at(col); }
  // Parses a finite double; throws "file:line: column 'x': 'abc' is not a number".
  double number(std::size_t row, std::size_t col) const;
  long long integer(std::size_t row, std::size_t col) const;
  const std::string& source() const { return source_; }

 private:
  std::optional<std::size_t> find(const std::string& name) const;
  std::string source_;
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> cells_;
  std::vector<std::size_t> line_of_row_;
};

// Splits one line on commas, trimming surrounding spaces and a trailing '\r'.
std::vector<std::string> split_csv_line(const std::string& line);

}  // namespace common
