// The console table of every bench: columns joined by one space, "| " before the
// first column of each group, headings and cells aligned to the column's width.
#include <fmt/format.h>

#include "common/check.hpp"
#include "xstage/bench/report.hpp"

namespace xstage::bench {

namespace {

std::string aligned(const std::string& text, const Column& c) {
  return c.left ? fmt::format("{:<{}}", text, c.width) : fmt::format("{:>{}}", text, c.width);
}

std::string format_cell(const Cell& v, const Column& c) {
  if (const auto* d = std::get_if<double>(&v))
    return aligned(fmt::format(fmt::runtime("{:" + c.spec + "}"), *d), c);
  if (const auto* i = std::get_if<long long>(&v)) return aligned(fmt::format("{}", *i), c);
  if (const auto* s = std::get_if<std::string>(&v)) return aligned(*s, c);
  return aligned("-", c);
}

}  // namespace

Table& Table::add(Column c) {
  columns_.push_back(std::move(c));
  return *this;
}

std::string Table::join(const std::vector<std::string>& texts) const {
  std::string out;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    if (i > 0) out += ' ';
    if (columns_[i].group) out += "| ";
    out += texts[i];
  }
  return out;
}

std::string Table::header() const {
  std::vector<std::string> texts;
  for (const Column& c : columns_) texts.push_back(aligned(c.head, c));
  return join(texts);
}

std::string Table::line(const std::vector<Cell>& cells) const {
  XS_ASSERT(cells.size() == columns_.size(), "bench table: {} cells for {} columns", cells.size(), columns_.size());
  std::vector<std::string> texts;
  for (std::size_t i = 0; i < cells.size(); ++i) texts.push_back(format_cell(cells[i], columns_[i]));
  return join(texts);
}

}  // namespace xstage::bench
