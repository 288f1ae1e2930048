// fuzz_replay: every fuzz target over its seeds and deterministic mutations of them,
// for CTest on any compiler (libFuzzer needs clang; see fuzz_target.hpp).
//
//   fuzz_replay [--target NAME] [--mutations N] [--budget-s S]
//       runs the seeds (code + fuzz/corpus/NAME/*), then N mutations per target
//       (Mutator, fixed seed), stopping a target early after S seconds; prints one table
//       row per target and exits 1 on any finding (an exception other than
//       common::Error; a crash writes the input to fuzz-crash-NAME.bin first).
//   fuzz_replay --target NAME --input FILE   runs one input (reproduces a finding)
//   fuzz_replay --write-seeds DIR            writes the code seeds to DIR/NAME/ (for libFuzzer)
#include <fmt/format.h>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "fuzz_target.hpp"
#include "mutate.hpp"

#ifndef XS_FUZZ_CORPUS_DIR
#define XS_FUZZ_CORPUS_DIR "fuzz/corpus"
#endif

namespace {

namespace fs = std::filesystem;
using xs_fuzz::Bytes;

constexpr std::uint64_t kMutationSeed = 0x58535f46555a5aull;  // "XS_FUZZ": the same inputs on every run

// The input being run, for the crash handler.
const Bytes* g_current = nullptr;
std::string g_crash_file;

extern "C" void on_crash(int sig) {
  if (g_current) {
    const int fd = ::open(g_crash_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      [[maybe_unused]] auto n = ::write(fd, g_current->data(), g_current->size());
      ::close(fd);
    }
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

Bytes read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return xs_fuzz::to_bytes(ss.str());
}

std::vector<Bytes> all_seeds(const xs_fuzz::Target& t) {
  std::vector<Bytes> seeds = t.seeds();
  const fs::path dir = fs::path(XS_FUZZ_CORPUS_DIR) / t.name;
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) seeds.push_back(read_bytes(f));
  return seeds;
}

// One input; returns the finding ("" if none).
std::string run_one(const xs_fuzz::Target& t, const Bytes& input) {
  g_current = &input;
  std::string finding;
  try {
    t.run(input.data(), input.size());
  } catch (const std::exception& e) {
    finding = e.what();
  } catch (...) {
    finding = "an exception that is not a std::exception";
  }
  g_current = nullptr;
  return finding;
}

struct Row {
  std::size_t seeds = 0, seeds_refused = 0, inputs = 0, refused = 0, findings = 0;
  double seconds = 0, slowest_ms = 0;
};

Row replay(const xs_fuzz::Target& t, std::size_t mutations, double budget_s) {
  g_crash_file = fmt::format("fuzz-crash-{}.bin", t.name);
  const std::vector<Bytes> seeds = all_seeds(t);
  Row row;
  row.seeds = seeds.size();
  const std::size_t refused_before = xs_fuzz::refusals();
  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  xs_fuzz::Mutator mutate(kMutationSeed ^ std::hash<std::string>{}(t.name));
  for (std::size_t i = 0; i < seeds.size() + mutations; ++i) {
    if (i >= seeds.size() && seconds() > budget_s) break;
    const Bytes input = i < seeds.size() ? seeds[i] : mutate(seeds[mutate.below(seeds.size())], seeds);
    const double t0 = seconds();
    const std::string finding = run_one(t, input);
    row.slowest_ms = std::max(row.slowest_ms, 1000 * (seconds() - t0));
    ++row.inputs;
    if (i + 1 == seeds.size()) row.seeds_refused = xs_fuzz::refusals() - refused_before;
    if (!finding.empty()) {
      ++row.findings;
      const std::string file = fmt::format("fuzz-finding-{}-{}.bin", t.name, i);
      std::ofstream(file, std::ios::binary).write(reinterpret_cast<const char*>(input.data()), input.size());
      fmt::print(stderr, "finding: {} input {} ({}): {}\n", t.name, i, file, finding);
    }
  }
  row.seconds = seconds();
  row.refused = xs_fuzz::refusals() - refused_before;
  return row;
}

int write_seeds(const fs::path& dir) {
  for (const auto& t : xs_fuzz::targets()) {
    fs::create_directories(dir / t.name);
    const auto seeds = t.seeds();
    for (std::size_t i = 0; i < seeds.size(); ++i)
      std::ofstream(dir / t.name / fmt::format("gen-{}", i), std::ios::binary)
          .write(reinterpret_cast<const char*>(seeds[i].data()), seeds[i].size());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string only, input, seeds_dir;
  std::size_t mutations = 40000;
  double budget_s = 6;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--target") only = v;
    else if (a == "--input") input = v;
    else if (a == "--write-seeds") seeds_dir = v;
    else if (a == "--mutations") mutations = std::stoul(v);
    else if (a == "--budget-s") budget_s = std::stod(v);
    else return fmt::print(stderr, "fuzz_replay: unknown option {}\n", a), 2;
  }
  if (!seeds_dir.empty()) return write_seeds(seeds_dir);
  for (int sig : {SIGSEGV, SIGABRT, SIGFPE, SIGBUS, SIGILL}) std::signal(sig, on_crash);
  if (!input.empty()) {
    const xs_fuzz::Target* t = xs_fuzz::find_target(only);
    if (!t) return fmt::print(stderr, "fuzz_replay: --input needs --target NAME\n"), 2;
    const std::string finding = run_one(*t, read_bytes(input));
    fmt::print("{}: {}\n", input, finding.empty() ? "clean (accepted or refused with common::Error)" : finding);
    return finding.empty() ? 0 : 1;
  }
  std::size_t findings = 0, total_inputs = 0;
  double total_s = 0;
  fmt::print("{:<12} {:>5} {:>13} {:>7} {:>7} {:>8} {:>7} {:>10} {:>8}\n", "target", "seeds", "seeds_refused", "inputs",
             "refused", "accepted", "seconds", "slowest_ms", "findings");
  for (const auto& t : xs_fuzz::targets()) {
    if (!only.empty() && t.name != only) continue;
    const Row r = replay(t, mutations, budget_s);
    fmt::print("{:<12} {:>5} {:>13} {:>7} {:>7} {:>8} {:>7.2f} {:>10.1f} {:>8}\n", t.name, r.seeds, r.seeds_refused,
               r.inputs, r.refused, r.inputs - r.refused - r.findings, r.seconds, r.slowest_ms, r.findings);
    findings += r.findings;
    total_inputs += r.inputs;
    total_s += r.seconds;
  }
  fmt::print("{} inputs in {:.1f} s, {} findings\n", total_inputs, total_s, findings);
  return findings == 0 ? 0 : 1;
}
