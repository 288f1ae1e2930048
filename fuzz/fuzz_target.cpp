#include "fuzz_target.hpp"

#include "common/check.hpp"

namespace xs_fuzz {

std::vector<Target>& targets() {
  static std::vector<Target> all;  // filled by static Registration objects
  return all;
}

const Target* find_target(const std::string& name) {
  for (const auto& t : targets())
    if (t.name == name) return &t;
  return nullptr;
}

Registration::Registration(std::string name, std::function<void(const std::uint8_t*, std::size_t)> run,
                           std::function<std::vector<Bytes>()> seeds) {
  targets().push_back({std::move(name), std::move(run), std::move(seeds)});
}

namespace {
thread_local std::size_t refused = 0;
}

void expect_clean(const std::function<void()>& parse) {
  try {
    parse();
  } catch (const common::Error&) {
    ++refused;  // refused with a message: the expected outcome for bad input
  }
}

std::size_t refusals() { return refused; }

Bytes to_bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }

std::string to_text(const std::uint8_t* data, std::size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

}  // namespace xs_fuzz
