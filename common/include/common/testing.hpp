// Test support shared by the test suites.
#pragma once

#include <functional>
#include <string>

#include "common/check.hpp"

namespace common {

// Runs f and returns the message of the common::Error it throws ("" if none), so a
// test can check both that bad input is refused and what the one-line reason says.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const common::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace common
