// Fuzz targets: one per parser of untrusted input (docs/reliability.md).
//
// A target takes bytes and hands them to one reader. The contract it checks is the
// project's rule for bad input: the reader returns a value or throws common::Error
// (one line naming the source); any other exception, a crash, a hang or a sanitizer
// report is a finding. Two drivers run the same targets:
//   fuzz_replay  (CTest, any compiler) every target over its seeds and a fixed number
//                of deterministic mutations of them (replay.cpp), within a time budget;
//   xs_fuzz      (XSTAGE_FUZZ=ON, clang) libFuzzer's open-ended search, one target per
//                run chosen by XS_FUZZ_TARGET (libfuzzer_main.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace xs_fuzz {

using Bytes = std::vector<std::uint8_t>;

struct Target {
  std::string name;
  // Feeds one input to the parser; common::Error is caught inside (a clean refusal).
  std::function<void(const std::uint8_t*, std::size_t)> run;
  // Valid inputs built in code (binary formats are easiest made by their encoders);
  // fuzz/corpus/<name>/ adds committed ones.
  std::function<std::vector<Bytes>()> seeds;
};

std::vector<Target>& targets();
const Target* find_target(const std::string& name);

struct Registration {
  Registration(std::string name, std::function<void(const std::uint8_t*, std::size_t)> run,
               std::function<std::vector<Bytes>()> seeds);
};

// Runs `parse` and swallows common::Error: refusing bad input with one line is the
// expected outcome. Anything else escapes and is reported by the driver.
void expect_clean(const std::function<void()>& parse);
// Inputs refused so far on this thread (expect_clean's count), for the replay's table.
std::size_t refusals();

Bytes to_bytes(const std::string& s);
std::string to_text(const std::uint8_t* data, std::size_t size);

}  // namespace xs_fuzz

#define XS_FUZZ_CONCAT2(a, b) a##b
#define XS_FUZZ_CONCAT(a, b) XS_FUZZ_CONCAT2(a, b)
// XS_FUZZ_TARGET(name, seeds_fn, run_fn): registers a target at start-up.
#define XS_FUZZ_TARGET(name, seeds_fn, run_fn) \
  static const ::xs_fuzz::Registration XS_FUZZ_CONCAT(xs_fuzz_registration_, __LINE__)(name, run_fn, seeds_fn)
