// A compact statistical model of walking, learned from captured gait cycles.
//
// Each cycle becomes a code: for each of 49 features (16 bone directions x 3 heading-
// frame components, plus lateral pelvis sway) the Fourier coefficients a0, a_k, b_k for
// k = 1..kHarmonics of its periodic curve over phase [0, 1), followed by log(duration).
// Walking joint-angle curves are smooth and periodic: six harmonics keep their shape
// (the residual is reported by `gait mocap`).
//
// The model is a PCA of the codes, every captured person weighted equally (one person
// with many clips must not define "average walking"). New walkers are drawn as
//   identity = mean + sum_i z_i * sd_i * v_i,   z_i ~ N(0, 1) clipped to +-kMaxZ,
// and each of their sequences adds a smaller within-person variation
//   sequence = identity + sum_i e_i * sd_within_i * v_i * kSequenceSpread.
// Because codes are linear combinations of real cycles they stay self-consistent;
// bone directions are re-normalised when evaluated.
#pragma once

#include <array>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "gait/rng.hpp"
#include "gait/synth/gait_cycles.hpp"

namespace gait {

inline constexpr int kHarmonics = 6;
inline constexpr int kCoefs = 2 * kHarmonics + 1;
inline constexpr int kCycleFeatures = kCanonBones * 3 + 1;
inline constexpr int kCodeSize = kCycleFeatures * kCoefs + 1;
inline constexpr int kPhaseSamples = 64;  // samples per cycle for the Fourier fit
inline constexpr double kMaxZ = 2.0;
// Between two walks a person varies as much as the captured people vary between their
// own natural-pace clips (sd_within is measured on them): a smaller factor would make
// procedural walkers more repeatable than any real person, and motion the easiest cue.
inline constexpr double kSequenceSpread = 1.0;

// A capture whose label asks for another pace or step ("slow walk", "walk/stride",
// "fast walk"): CASIA-B's walks are all at the subject's own pace, so such clips count
// as ways people walk (the identity space) but not as a person's walk-to-walk spread.
bool instructed_pace(const std::string& description);

struct CycleCode {
  std::array<double, kCodeSize> v{};
  double duration_s() const;
};

CycleCode encode_cycle(const CycleSamples& s);

// The walker's pose at `phase` (wraps): unit bone directions in the heading frame and sway.
struct PhasePose {
  std::array<Vec3, kCanonBones> dirs;
  double sway = 0;  // leg lengths
};
PhasePose evaluate_code(const CycleCode& c, double phase);

struct GaitModel {
  CycleCode mean;
  std::vector<CycleCode> basis;               // orthonormal principal directions
  std::vector<double> sd, sd_within;          // per component
  // The real natural-pace cycles, per person (all of a person's cycles when none is).
  std::map<std::string, std::vector<CycleCode>> person_cycles;
  double explained = 0;                       // variance fraction the basis keeps

  // components: how many principal directions to keep (at most cycles - 1). natural:
  // per code, whether it was walked at the person's own pace (empty: all were); the
  // mean and the basis use every code, sd_within and person_cycles the natural ones.
  static GaitModel learn(const std::vector<CycleCode>& codes, const std::vector<std::string>& persons, int components,
                         const std::vector<bool>& natural = {});
  CycleCode sample_identity(Rng& rng) const;
  CycleCode vary_sequence(const CycleCode& identity, Rng& rng) const;
  std::vector<std::string> persons() const;
};

// Everything from a folder of captures: parse, retarget, cut, encode, learn.
struct MotionLibrary {
  GaitModel model;
  std::size_t clips = 0, clips_failed = 0, cycles = 0;
  std::size_t cycles_instructed = 0;  // cycles of clips labelled with another pace (instructed_pace)
  std::map<std::string, std::size_t> cycles_per_person;
  std::vector<std::string> problems;
  double fourier_rms = 0;  // mean residual of the 6-harmonic fit, in direction units
};
MotionLibrary build_motion_library(const std::filesystem::path& mocap_dir, int components = 12);

}  // namespace gait
