// Cutting clean gait cycles out of a capture, and sampling one in its own heading frame.
//
// A cycle runs from one left heel strike to the next. Heel strikes are the maxima of
// the forward distance between the left and the right ankle (the left foot is then
// furthest ahead), with the forward direction taken from the pelvis velocity smoothed
// over +-kHeadingWindowS. Turning, standing and the inserted T-pose are rejected by the
// checks in CycleLimits. Boundaries are refined to sub-frame precision (parabola).
#pragma once

#include <array>
#include <string>
#include <vector>

#include "gait/synth/canonical.hpp"

namespace gait {

inline constexpr double kHeadingWindowS = 0.25;

struct CycleLimits {
  double min_duration_s = 0.7, max_duration_s = 1.8;  // human walking: about 0.9 - 1.4 s
  double min_stride = 0.6, max_stride = 2.6;          // pelvis travel per cycle, in leg lengths
  double min_straightness = 0.9;                      // net travel / path length
  double max_turn_deg = 25;                           // heading change over the cycle
};

struct GaitCycle {
  std::string clip, person;
  double start = 0, end = 0;  // fractional frame indices of the two left heel strikes
  double duration_s = 0;
  double stride = 0;          // pelvis travel over the cycle / leg length
};

struct CycleCutReport {
  std::size_t candidates = 0, too_short_or_long = 0, not_walking = 0, turning = 0;
};

std::vector<GaitCycle> cut_gait_cycles(const CanonMotion& m, const CycleLimits& lim = {},
                                       CycleCutReport* report = nullptr);

// One cycle sampled at n phases in [0, 1): bone directions in the heading frame
// (x forward, y up, z to the walker's right) and the pelvis's lateral sway from the
// straight line (in leg lengths, + = right).
struct CycleSamples {
  std::vector<std::array<Vec3, kCanonBones>> dirs;  // [n][bone]
  std::vector<double> sway;                         // [n]
  double duration_s = 0;
};
CycleSamples sample_cycle(const CanonMotion& m, const GaitCycle& c, int n);

}  // namespace gait
