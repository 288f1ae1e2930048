// One validation layer per kind of input, shared by the xstage and gait CLIs and by
// every reader. Each check throws common::Error with one line that names the input
// (an option such as "--threads", a file, or "file:line"), the field and the reason,
// so a bad value is refused where it enters instead of travelling into results.
//
//   numbers   range checks with the unit in the message; CLI11 validators for options
//   files     kind (file or folder), existence, readability
//   tables    CSV schema: required columns, finite numeric cells
//   arrays    finite values (embeddings, parameters, poses, weights)
//   sets      duplicates (views, sequence ids)
//
// Options that mean "use the config" are std::optional (empty: the config's value),
// never a magic 0 or -1, so every value a user types is checked.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "common/check.hpp"

namespace CLI {
class Validator;
}

namespace common {
class CsvTable;
}

namespace common::validate {

// ============================================================================
// Numbers
// ============================================================================

// Throws "<what>: <v> <unit> is not finite" for NaN and infinities.
void finite(double v, std::string_view what, std::string_view unit);
// Throws "<what>: <v> <unit> is out of range (<lo> .. <hi> <unit>)"; non-finite values too.
void in_range(double v, double lo, double hi, std::string_view what, std::string_view unit);
// Throws "<what>: <v> <unit> is below the minimum <lo> <unit>"; non-finite values too.
void at_least(double v, double lo, std::string_view what, std::string_view unit);

// CLI11 validators (CLI11 parses the number; these add the range and the unit to its
// message: "--threads: -3 threads is below the minimum 0 threads (0: all cores)").
// `note` (optional) follows the rule in the message, e.g. what 0 means.
CLI::Validator range(double lo, double hi, std::string unit, std::string note = "");
CLI::Validator min(double lo, std::string unit, std::string note = "");

// ============================================================================
// Files and folders
// ============================================================================

// Throws "<what> <path>: no such file", "...: is a folder, not a file",
// "...: is not a regular file" or "...: cannot be read (<reason>)".
void file(const std::filesystem::path& path, std::string_view what);
// Throws "<what> <path>: no such folder", "...: is a file, not a folder" or "...: cannot be listed".
void folder(const std::filesystem::path& path, std::string_view what);
// CLI11 validators doing the same for an option's value.
CLI::Validator readable_file();
CLI::Validator existing_folder();
// common::check_output_path / check_output_dir as CLI11 validators: an output that could
// not be written later is refused at parse time, before any work.
CLI::Validator output_file();
CLI::Validator output_folder();

// ============================================================================
// Tables (CSV)
// ============================================================================

// Throws "<file>: missing column 'x' (it has: a, b, c)" naming the first absent column.
void columns(const CsvTable& t, std::initializer_list<std::string_view> required);
// Every cell of the named columns is a finite number (CsvTable::number names file:line,
// column and cell otherwise).
void finite_cells(const CsvTable& t, std::initializer_list<std::string_view> names);

// ============================================================================
// Arrays
// ============================================================================

std::optional<std::size_t> first_non_finite(std::span<const float> xs);
// Rows of `row_size` values: throws "<source>: <row_name(r)>: value <i> of <row_size> is nan"
// at the first non-finite value. row_name(r) names the row ("row 4 (075-nm-05-090)").
void finite_rows(std::span<const float> data, std::size_t row_size, std::string_view source,
                 const std::function<std::string(std::size_t)>& row_name);

// ============================================================================
// Sets
// ============================================================================

// Indices (first, second) of the first value that occurs twice, in order of the second.
template <class T>
std::optional<std::pair<std::size_t, std::size_t>> first_duplicate(std::span<const T> xs) {
  std::map<T, std::size_t> seen;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    auto [it, fresh] = seen.emplace(xs[i], i);
    if (!fresh) return std::pair{it->second, i};
  }
  return std::nullopt;
}

// Throws "<what>: <value> is given twice" (values printable with fmt).
template <class T>
void unique(std::span<const T> xs, std::string_view what) {
  if (const auto d = first_duplicate(xs))
    throw Error(fmt::format("{}: {} is given twice (items {} and {})", what, xs[d->second], d->first + 1,
                            d->second + 1));
}

}  // namespace common::validate
