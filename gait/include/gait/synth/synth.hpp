// `gait synth`: writes a synthetic dataset in the CASIA-B layout.
//
//   OUT/silhouettes/<sid>/<cond>-<nn>/<view>/<sid>-<cond>-<nn>-<view>-<frame>.png
//   OUT/pose/<sid>/<sid>-<cond>-<nn>-<view>.csv     (GaitGraph's CSV format)
//   OUT/synth.json                                  (options, subjects, per-sequence counts)
//
// Work is spread over threads by (subject, condition, sequence); a progress bar
// counts sequences. A non-empty OUT is refused unless `force`, which replaces only
// the generator's own outputs (silhouettes/, pose/, synth.json).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "gait/synth/generator.hpp"

namespace gait {

struct SynthOptions {
  std::filesystem::path out;
  std::filesystem::path mocap;  // empty: the embedded captures
  GeneratorOptions gen;
  bool force = false;
  int threads = 0;  // 0: all hardware threads
  bool progress = true;
};

// The CI/demo preset: 8 subjects (5 train, 3 test under protocol_for_subjects), all
// conditions and views.
inline constexpr int kSmallSubjects = 8;

struct SynthReport {
  std::size_t sequences = 0, frames = 0, pose_rows = 0;
  std::size_t joints_checked = 0, joints_inside = 0;
  std::vector<std::string> mocap_persons_used;
  std::size_t mocap_cycles = 0;
  double seconds = 0;      // wall clock, model learning to manifest
  double cpu_seconds = 0;  // user + system time of all threads over the same span
  int threads = 0;
  double joint_in_silhouette() const {
    return joints_checked ? static_cast<double>(joints_inside) / static_cast<double>(joints_checked) : 0.0;
  }
};

SynthReport synthesize(const SynthOptions& opts);

}  // namespace gait
