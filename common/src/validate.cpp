#include "common/validate.hpp"

#include <unistd.h>

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "common/csv.hpp"
#include "common/files.hpp"

namespace common::validate {

namespace fs = std::filesystem;

namespace {

// "16 threads", or "16" when the unit is empty; whole numbers in full ("1048576", not
// "1.04858e+06"), others as {:g}.
std::string with_unit(double v, std::string_view unit) {
  const bool whole = std::isfinite(v) && v == std::floor(v) && std::abs(v) < 1e15;
  const std::string n = whole ? fmt::format("{}", static_cast<long long>(v)) : fmt::format("{:g}", v);
  return unit.empty() ? n : fmt::format("{} {}", n, unit);
}

std::string range_text(double lo, double hi, std::string_view unit) {
  if (hi >= std::numeric_limits<double>::max()) return fmt::format("at least {}", with_unit(lo, unit));
  return fmt::format("{} .. {}", with_unit(lo, ""), with_unit(hi, unit));
}

// "" when v is finite and within [lo, hi]; else the reason.
std::string range_problem(double v, double lo, double hi, std::string_view unit) {
  if (!std::isfinite(v)) return fmt::format("{} is not finite", with_unit(v, unit));
  if (v < lo && hi >= std::numeric_limits<double>::max())
    return fmt::format("{} is below the minimum {}", with_unit(v, unit), with_unit(lo, unit));
  if (v < lo || v > hi) return fmt::format("{} is out of range ({})", with_unit(v, unit), range_text(lo, hi, unit));
  return "";
}

// A CLI11 validator: the option's text parsed by CLI11 as a double, then range_problem.
CLI::Validator number_validator(double lo, double hi, std::string unit, std::string note) {
  std::string desc = unit.empty() ? range_text(lo, hi, "") : fmt::format("{} ({})", unit, range_text(lo, hi, ""));
  return CLI::Validator(
      [lo, hi, unit, note](std::string& text) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(text, v)) return fmt::format("'{}' is not a number", text);
        std::string why = range_problem(v, lo, hi, unit);
        if (!why.empty() && !note.empty()) why += " (" + note + ")";
        return why;
      },
      std::move(desc), "NUMBER");
}

// A CLI11 validator running a common::Error-throwing check on the option's text.
CLI::Validator path_validator(std::function<void(const fs::path&)> check, std::string desc) {
  return CLI::Validator(
      [check = std::move(check)](std::string& text) -> std::string {
        try {
          check(fs::path(text));
        } catch (const Error& e) {
          return e.what();
        }
        return "";
      },
      std::move(desc), "PATH");
}

}  // namespace

void finite(double v, std::string_view what, std::string_view unit) {
  if (!std::isfinite(v)) throw Error(fmt::format("{}: {} is not finite", what, with_unit(v, unit)));
}

void in_range(double v, double lo, double hi, std::string_view what, std::string_view unit) {
  const std::string why = range_problem(v, lo, hi, unit);
  if (!why.empty()) throw Error(fmt::format("{}: {}", what, why));
}

void at_least(double v, double lo, std::string_view what, std::string_view unit) {
  in_range(v, lo, std::numeric_limits<double>::max(), what, unit);
}

CLI::Validator range(double lo, double hi, std::string unit, std::string note) {
  return number_validator(lo, hi, std::move(unit), std::move(note));
}

CLI::Validator min(double lo, std::string unit, std::string note) {
  return number_validator(lo, std::numeric_limits<double>::max(), std::move(unit), std::move(note));
}

void file(const fs::path& path, std::string_view what) {
  const std::string name = what.empty() ? path.string() : fmt::format("{} {}", what, path.string());
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) throw Error(fmt::format("{}: no such file", name));
  if (fs::is_directory(st)) throw Error(fmt::format("{}: is a folder, not a file", name));
  if (!fs::is_regular_file(st)) throw Error(fmt::format("{}: is not a regular file", name));
  if (::access(path.c_str(), R_OK) != 0)
    throw Error(fmt::format("{}: cannot be read ({})", name, std::strerror(errno)));
}

void folder(const fs::path& path, std::string_view what) {
  const std::string name = what.empty() ? path.string() : fmt::format("{} {}", what, path.string());
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) throw Error(fmt::format("{}: no such folder", name));
  if (!fs::is_directory(st)) throw Error(fmt::format("{}: is a file, not a folder", name));
  if (::access(path.c_str(), R_OK | X_OK) != 0)
    throw Error(fmt::format("{}: cannot be listed ({})", name, std::strerror(errno)));
}

CLI::Validator readable_file() {
  return path_validator([](const fs::path& p) { file(p, ""); }, "FILE");
}

CLI::Validator existing_folder() {
  return path_validator([](const fs::path& p) { folder(p, ""); }, "DIR");
}

CLI::Validator output_file() {
  return path_validator([](const fs::path& p) { check_output_path(p, ""); }, "FILE");
}

CLI::Validator output_folder() {
  return path_validator([](const fs::path& p) { check_output_dir(p, ""); }, "DIR");
}

void columns(const CsvTable& t, std::initializer_list<std::string_view> required) {
  for (std::string_view c : required) {
    if (t.has_column(std::string(c))) continue;
    std::string have;
    for (const auto& h : t.header()) have += (have.empty() ? "" : ", ") + h;
    throw Error(fmt::format("{}: missing column '{}' (it has: {})", t.source(), c, have));
  }
}

void finite_cells(const CsvTable& t, std::initializer_list<std::string_view> names) {
  for (std::string_view name : names) {
    const std::size_t col = t.column(std::string(name));
    for (std::size_t r = 0; r < t.rows(); ++r) (void)t.number(r, col);
  }
}

std::optional<std::size_t> first_non_finite(std::span<const float> xs) {
  for (std::size_t i = 0; i < xs.size(); ++i)
    if (!std::isfinite(xs[i])) return i;
  return std::nullopt;
}

void finite_rows(std::span<const float> data, std::size_t row_size, std::string_view source,
                 const std::function<std::string(std::size_t)>& row_name) {
  const auto bad = first_non_finite(data);
  if (!bad) return;
  const std::size_t row = row_size ? *bad / row_size : 0, col = row_size ? *bad % row_size : *bad;
  throw Error(fmt::format("{}: {}: value {} of {} is {} (non-finite values are refused)", source, row_name(row),
                          col + 1, row_size, data[*bad]));
}

}  // namespace common::validate
