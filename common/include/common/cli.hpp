// The one way our command-line tools run a CLI11 app: parse and run the chosen
// sub-command, and turn every error into one line on stderr and a non-zero exit
// (2 for usage errors, 1 for everything else), never a crash.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "common/check.hpp"

namespace common {

inline int run_cli(CLI::App& app, int argc, char** argv, const char* prog) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: %s\n", prog, e.what());
    return 2;
  } catch (const std::exception& e) {  // common::Error and the rest
    std::fprintf(stderr, "%s: error: %s\n", prog, e.what());
    return 1;
  }
  return 0;
}

}  // namespace common
