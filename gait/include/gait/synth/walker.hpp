// A walking body in world coordinates (metres, Y up, walking along +X from x = 0 at
// t = 0): the gait code's bone directions, posture and condition changes, this body's
// segment lengths, then
//   - grounding: the pelvis height puts the lower foot's sole on the floor each frame;
//   - progression: the stance foot (the lower one) does not slide, so forward speed
//     follows from the legs' own kinematics (tabulated over one cycle at kProgressionSamples).
#pragma once

#include <array>
#include <vector>

#include "gait/synth/body.hpp"
#include "gait/synth/canonical.hpp"
#include "gait/synth/gait_model.hpp"

namespace gait {

inline constexpr int kProgressionSamples = 256;

struct WalkStyle {
  CycleCode code;
  double speed_factor = 1.0;  // cadence multiplier for this sequence
  double start_phase = 0;
  std::array<double, 2> arm_swing{1.0, 1.0};    // left, right: scales swing about the mean
  std::array<bool, 2> straight_arm{false, false};  // a hand-carried bag keeps the elbow straight
  double extra_lean_deg = 0;  // trunk lean added to the body's own (forward, degrees)
  double side_lean_deg = 0;   // trunk lean towards +z (the walker's right), degrees
};

class Walker {
 public:
  Walker(const BodyShape& body, const WalkStyle& style);
  CanonPose pose(double t) const;
  double speed() const { return speed_; }       // m/s
  double duration() const { return duration_; }  // s per cycle
  // The pose relative to the pelvis at a phase (pelvis at the origin, before grounding).
  CanonPose relative_pose(double phase) const;

 private:
  double offset_at(double phase) const;
  double ground_lift(const CanonPose& rel) const;  // pelvis height that grounds the lower foot
  BodyShape body_;
  WalkStyle style_;
  std::array<Vec3, kCanonBones> mean_dir_;
  double duration_ = 1, speed_ = 1, stride_ = 1;
  std::vector<double> offset_;  // progression minus its mean, over one cycle
};

}  // namespace gait
