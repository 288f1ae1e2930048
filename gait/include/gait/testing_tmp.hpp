// A scratch folder for tests, unique per process: several builds of the project may
// run the same tests at once on one machine.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace gait {

inline std::filesystem::path test_scratch_dir(const std::string& name) {
  return std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
}

}  // namespace gait
