#include "common/files.hpp"

#include <algorithm>
#include <ftw.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "common/check.hpp"

namespace common {

namespace {

int remove_entry(const char* path, const struct stat*, int, struct FTW*) { return ::remove(path) == 0 ? 0 : errno; }

std::filesystem::path temp_path_of(const std::filesystem::path& path) {
  return path.string() + ".tmp." + std::to_string(::getpid());
}

// Writes `bytes` to the temp file beside `path`; removes it and throws on failure.
std::filesystem::path write_temp(const std::filesystem::path& path, std::string_view bytes) {
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  const auto tmp = temp_path_of(path);
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(fmt::format("{}: cannot open for writing", tmp.string()));
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.flush();
  if (!out) {
    out.close();
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw Error(fmt::format("{}: write failed", path.string()));
  }
  return tmp;
}

void rename_into_place(const std::filesystem::path& tmp, const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw Error(fmt::format("{}: cannot rename into place", path.string()));
  }
}

}  // namespace

void write_file_atomic(const std::filesystem::path& path, std::string_view bytes) {
  rename_into_place(write_temp(path, bytes), path);
}

void write_files_atomic(const std::vector<std::pair<std::filesystem::path, std::string>>& files) {
  std::vector<std::filesystem::path> temps;
  try {
    for (const auto& [path, bytes] : files) {
      if (std::filesystem::is_directory(path)) throw Error(fmt::format("{}: is a directory", path.string()));
      temps.push_back(write_temp(path, bytes));
    }
  } catch (...) {
    std::error_code ec;
    for (const auto& t : temps) std::filesystem::remove(t, ec);
    throw;
  }
  for (std::size_t i = 0; i < files.size(); ++i) rename_into_place(temps[i], files[i].first);
}

namespace {

// "--json out.json", or just the path when no option is named.
std::string label(const std::filesystem::path& path, std::string_view what) {
  return what.empty() ? path.string() : fmt::format("{} {}", what, path.string());
}

// Throws when the nearest existing one of `dir` and its parents is not a directory.
void check_existing_part_is_dir(const std::filesystem::path& path, std::filesystem::path dir, std::string_view what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (; !dir.empty(); dir = dir.parent_path()) {
    if (fs::exists(dir, ec)) {
      if (!fs::is_directory(dir, ec))
        throw Error(fmt::format("{}: {} is not a directory", label(path, what), dir.string()));
      return;
    }
    if (dir == dir.parent_path()) return;
  }
}

}  // namespace

void check_output_path(const std::filesystem::path& path, std::string_view what) {
  std::error_code ec;
  if (path.empty()) throw Error(fmt::format("{}: empty path", what.empty() ? "output" : what));
  if (std::filesystem::is_directory(path, ec)) throw Error(fmt::format("{}: is a directory", label(path, what)));
  check_existing_part_is_dir(path, path.parent_path(), what);
}

void check_output_dir(const std::filesystem::path& path, std::string_view what) {
  if (path.empty()) throw Error(fmt::format("{}: empty path", what.empty() ? "output folder" : what));
  check_existing_part_is_dir(path, path, what);
}

std::string read_file(const std::filesystem::path& path) {
  std::error_code ec;
  // A folder opens and reads as empty: say what it is instead of "empty" or "not JSON".
  if (std::filesystem::is_directory(path, ec)) throw Error(fmt::format("{}: is a folder, not a file", path.string()));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot open for reading ({})", path.string(), std::strerror(errno)));
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error(fmt::format("{}: read failed", path.string()));
  return ss.str();
}

namespace {

namespace fs = std::filesystem;

// "out/" and "out" name the same target; the stage needs its last component.
fs::path normal_target(fs::path p) {
  p = p.lexically_normal();
  if (!p.has_filename() && p.has_parent_path()) p = p.parent_path();
  return p;
}

void move_into(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  if (ec) throw Error(fmt::format("{}: cannot move the new output into place ({})", to.string(), ec.message()));
}

}  // namespace

std::vector<fs::path> sorted_subfolders(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_directory(ec)) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

void remove_tree(const fs::path& path, std::error_code& ec) {
  ec.clear();
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) ec.assign(errno, std::generic_category());
    return;
  }
  const int rc = ::nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  if (rc > 0) ec.assign(rc, std::generic_category());  // the failing remove's errno
  else if (rc < 0) ec.assign(errno, std::generic_category());
}

OutputStage::OutputStage(fs::path target, Mode mode) : target_(normal_target(std::move(target))), mode_(mode) {
  if (target_.empty() || target_ == ".") throw Error("output folder: empty path");
  const fs::path parent = target_.has_parent_path() ? target_.parent_path() : fs::path(".");
  std::error_code ec;
  for (fs::path p = parent; !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
    created_.push_back(p);
    if (p == p.parent_path()) break;
  }
  stage_ = parent / fmt::format(".{}.stage-{}", target_.filename().string(), ::getpid());
  remove_tree(stage_, ec);
  fs::create_directories(stage_, ec);
  if (ec) throw Error(fmt::format("{}: cannot create the output's staging folder ({})", stage_.string(), ec.message()));
}

OutputStage::~OutputStage() {
  std::error_code ec;
  remove_tree(stage_, ec);
  if (committed_) return;
  for (const auto& p : created_) fs::remove(p, ec);  // only if still empty
}

void OutputStage::commit() {
  XS_ASSERT(!committed_, "{}: output committed twice", target_.string());
  std::error_code ec;
  if (!fs::exists(target_, ec)) {
    move_into(stage_, target_);
    committed_ = true;
    return;
  }
  if (!fs::is_directory(target_, ec)) throw Error(fmt::format("{}: exists and is not a folder", target_.string()));
  if (mode_ == Mode::replace) {
    for (const auto& e : fs::directory_iterator(stage_)) {
      const fs::path to = target_ / e.path().filename();
      remove_tree(to, ec);
      move_into(e.path(), to);
    }
  } else {
    std::vector<fs::path> files;
    for (const auto& e : fs::recursive_directory_iterator(stage_))
      if (!e.is_directory()) files.push_back(e.path());
    for (const auto& f : files) {
      const fs::path to = target_ / f.lexically_relative(stage_);
      fs::create_directories(to.parent_path(), ec);
      if (fs::is_directory(to, ec)) throw Error(fmt::format("{}: is a folder, not a file", to.string()));
      move_into(f, to);
    }
  }
  committed_ = true;
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
  double scale = 0;
  if (unit == "ns") scale = 1;
  else if (unit == "us" || unit == "µs") scale = 1e3;
  else if (unit == "ms") scale = 1e6;
  else if (unit == "s") scale = 1e9;
  else if (unit.empty() && v == 0) return 0;
  else throw Error(fmt::format("{}: '{}' needs a unit (ns, us, ms, s)", what, text));
  // The same ceiling as parse_bytes: beyond it, sums and products of times overflow
  // into "inf" in the models that use them (1e18 ns is 32 years).
  const double ns = v * scale;
  if (ns > 1e18) throw Error(fmt::format("{}: '{}' is too long (at most 1e18 ns)", what, text));
  return ns;
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
