// xs_fuzz: libFuzzer's entry point over the registered targets (fuzz_target.hpp).
//   XS_FUZZ_TARGET=png ./xs_fuzz -max_total_time=60 corpus_dir/
// The target is chosen once, by name, from the environment.
#include <cstdio>
#include <cstdlib>

#include "fuzz_target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const xs_fuzz::Target* target = [] {
    const char* name = std::getenv("XS_FUZZ_TARGET");
    const xs_fuzz::Target* t = name ? xs_fuzz::find_target(name) : nullptr;
    if (!t) {
      std::fprintf(stderr, "xs_fuzz: set XS_FUZZ_TARGET to one of:");
      for (const auto& k : xs_fuzz::targets()) std::fprintf(stderr, " %s", k.name.c_str());
      std::fprintf(stderr, "\n");
      std::exit(2);
    }
    return t;
  }();
  target->run(data, size);
  return 0;
}
