#include "common/files.hpp"

#include <unistd.h>

#include <cctype>
#include <cmath>
#include <fstream>
#include <sstream>
#include <utility>

#include "common/check.hpp"

namespace common {

void write_file_atomic(const std::filesystem::path& path, std::string_view bytes) {
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  const auto tmp = std::filesystem::path(path.string() + ".tmp." + std::to_string(::getpid()));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(fmt::format("{}: cannot open for writing", tmp.string()));
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) {
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      throw Error(fmt::format("{}: write failed", path.string()));
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw Error(fmt::format("{}: cannot rename into place", path.string()));
  }
}

namespace {

// Throws when the nearest existing one of `dir` and its parents is not a directory.
void check_existing_part_is_dir(const std::filesystem::path& path, std::filesystem::path dir, std::string_view what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (; !dir.empty(); dir = dir.parent_path()) {
    if (fs::exists(dir, ec)) {
      if (!fs::is_directory(dir, ec))
        throw Error(fmt::format("{} {}: {} is not a directory", what, path.string(), dir.string()));
      return;
    }
    if (dir == dir.parent_path()) return;
  }
}

}  // namespace

void check_output_path(const std::filesystem::path& path, std::string_view what) {
  std::error_code ec;
  if (path.empty()) throw Error(fmt::format("{}: empty path", what));
  if (std::filesystem::is_directory(path, ec)) throw Error(fmt::format("{} {}: is a directory", what, path.string()));
  check_existing_part_is_dir(path, path.parent_path(), what);
}

void check_output_dir(const std::filesystem::path& path, std::string_view what) {
  if (path.empty()) throw Error(fmt::format("{}: empty path", what));
  check_existing_part_is_dir(path, path, what);
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot open for reading", path.string()));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {

// Splits "1.5 MiB" into (1.5, "mib"); throws on a malformed number.
std::pair<double, std::string> number_and_unit(std::string_view text, std::string_view what) {
  std::string s(text);
  std::size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  const char* begin = s.c_str() + i;
  char* end = nullptr;
  const double v = std::strtod(begin, &end);
  if (end == begin || !std::isfinite(v))
    throw Error(fmt::format("{}: '{}' is not a number with an optional unit", what, text));
  std::string unit;
  for (const char* p = end; *p; ++p)
    if (!std::isspace(static_cast<unsigned char>(*p)))
      unit.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(*p))));
  if (v < 0) throw Error(fmt::format("{}: '{}' is negative", what, text));
  return {v, unit};
}

}  // namespace

std::size_t parse_bytes(std::string_view text, std::string_view what) {
  auto [v, unit] = number_and_unit(text, what);
  double mult = 0;
  if (unit.empty() || unit == "b") mult = 1;
  else if (unit == "k" || unit == "kib") mult = 1024.0;
  else if (unit == "kb") mult = 1000.0;
  else if (unit == "m" || unit == "mib") mult = 1024.0 * 1024.0;
  else if (unit == "mb") mult = 1e6;
  else if (unit == "g" || unit == "gib") mult = 1024.0 * 1024.0 * 1024.0;
  else if (unit == "gb") mult = 1e9;
  else throw Error(fmt::format("{}: unknown size unit '{}' in '{}'", what, unit, text));
  const double bytes = v * mult;
  if (bytes > 1e18) throw Error(fmt::format("{}: '{}' is too large", what, text));
  if (bytes != std::floor(bytes)) throw Error(fmt::format("{}: '{}' is not a whole number of bytes", what, text));
  return static_cast<std::size_t>(bytes);
}

double parse_duration_ns(std::string_view text, std::string_view what) {
  auto [v, unit] = number_and_unit(text, what);
  if (unit == "ns") return v;
  if (unit == "us" || unit == "µs") return v * 1e3;
  if (unit == "ms") return v * 1e6;
  if (unit == "s") return v * 1e9;
  if (unit.empty() && v == 0) return 0;
  throw Error(fmt::format("{}: '{}' needs a unit (ns, us, ms, s)", what, text));
}

std::string format_bytes(double bytes) {
  if (bytes >= 1024.0 * 1024.0 * 1024.0) return fmt::format("{:.2f} GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  if (bytes >= 1024.0 * 1024.0) return fmt::format("{:.2f} MiB", bytes / (1024.0 * 1024.0));
  if (bytes >= 1024.0) return fmt::format("{:.1f} KiB", bytes / 1024.0);
  return fmt::format("{:.0f} B", bytes);
}

std::string format_ns(double ns) {
  if (ns >= 1e6) return fmt::format("{:.3f} ms", ns / 1e6);
  if (ns >= 1e3) return fmt::format("{:.2f} us", ns / 1e3);
  return fmt::format("{:.0f} ns", ns);
}

}  // namespace common
