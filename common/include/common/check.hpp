// Error helpers shared by every host module.
//
//   XS_ASSERT(cond, fmt, args...)  throws common::Error("file:line: message")
//   XS_FAIL(fmt, args...)          same, unconditionally
//
// CLI front ends catch common::Error, print its one-line message and exit non-zero,
// so bad input never becomes a crash or a hang.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace common {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Strips the directory part so messages stay one short line.
constexpr const char* basename_of(const char* path) {
  const char* base = path;
  for (const char* p = path; *p; ++p) {
    if (*p == '/') base = p + 1;
  }
  return base;
}

[[noreturn]] inline void raise(const char* file, int line, const std::string& msg) {
  throw Error(fmt::format("{}:{}: {}", basename_of(file), line, msg));
}

}  // namespace common

#define XS_FAIL(...) ::common::raise(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__))
#define XS_ASSERT(cond, ...)                \
  do {                                      \
    if (!(cond)) [[unlikely]] {             \
      XS_FAIL(__VA_ARGS__);                 \
    }                                       \
  } while (0)
