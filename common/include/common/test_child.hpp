// Tests that need a fresh process (one that has not initialised CUDA before a
// fork(), or one whose device wait must time out and trap) re-execute their own
// binary as `<binary> --child=NAME`. Header-only and free of {fmt}, so CUDA
// test sources can include it.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <string>
#include <utility>

namespace common {

// Runs `<this binary> --child=NAME` with `env` ("VAR=value ...") in front;
// returns its exit status (128 when it did not exit normally) and its stdout + stderr.
inline std::pair<int, std::string> run_self_as_child(const std::string& name, const std::string& env = "") {
  const std::string cmd = env + " /proc/" + std::to_string(::getpid()) + "/exe --child=" + name + " 2>&1";
  FILE* f = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (f && std::fgets(buf, sizeof buf, f)) out += buf;
  const int st = f ? ::pclose(f) : -1;
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128, out};
}

// The body of main(): child(NAME) when the arguments hold --child=NAME, else the
// GoogleTest suites.
inline int test_main_with_children(int argc, char** argv, const std::function<int(const std::string&)>& child) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--child=", 0) == 0) return child(a.substr(8));
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

}  // namespace common
