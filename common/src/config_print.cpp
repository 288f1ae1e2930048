#include "common/config_print.hpp"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

namespace common {

bool print_config_enabled() {
  const char* e = std::getenv("XSTAGE_PRINT_CONFIG");  // read each time: tests set it at run time
  return e && std::strcmp(e, "1") == 0;
}

bool first_config_print(const std::string& key) {
  static std::mutex mu;
  static std::set<std::string> seen;
  std::lock_guard lock(mu);
  return seen.insert(key).second;
}

}  // namespace common
