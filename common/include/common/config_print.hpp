// XSTAGE_PRINT_CONFIG=1: the planners print each distinct choice they make once,
// to stderr (kernel configs, schedules, Burst-Gap advice).
#pragma once

#include <cstdio>
#include <string>

namespace common {

bool print_config_enabled();  // XSTAGE_PRINT_CONFIG is "1"

// True the first time `key` is seen in this process (thread-safe).
bool first_config_print(const std::string& key);

// Prints line() once per key when enabled; line is only evaluated then.
template <class Line>
void print_config_once(const std::string& key, Line&& line) {
  if (!print_config_enabled() || !first_config_print(key)) return;
  const std::string text = line();
  std::fprintf(stderr, "%s\n", text.c_str());
}

}  // namespace common
