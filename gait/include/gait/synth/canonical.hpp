// The canonical walker skeleton that every capture is retargeted to, and that the
// generator poses, dresses and renders. 17 joints, 16 bones; a bone is represented
// by its unit direction, so proportions come from the body (body.hpp), not the source.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "gait/geometry.hpp"
#include "gait/motion/clip.hpp"

namespace gait {

enum Canon : int {
  cPelvis, cLHip, cRHip, cLKnee, cRKnee, cLAnkle, cRAnkle, cLToe, cRToe,
  cNeck, cHead, cLShoulder, cRShoulder, cLElbow, cRElbow, cLWrist, cRWrist, kCanonJoints
};
// cNeck is the base of the neck, cHead the base of the skull, cLToe/cRToe the ball of the foot.

struct CanonBone {
  int parent, child;
};
inline constexpr int kCanonBones = 16;
inline constexpr std::array<CanonBone, kCanonBones> kCanonBoneList = {{
    {cPelvis, cLHip}, {cPelvis, cRHip}, {cLHip, cLKnee}, {cRHip, cRKnee}, {cLKnee, cLAnkle}, {cRKnee, cRAnkle},
    {cLAnkle, cLToe}, {cRAnkle, cRToe}, {cPelvis, cNeck}, {cNeck, cHead}, {cNeck, cLShoulder}, {cNeck, cRShoulder},
    {cLShoulder, cLElbow}, {cRShoulder, cRElbow}, {cLElbow, cLWrist}, {cRElbow, cRWrist}}};
enum CanonBoneId : int {
  bLHip, bRHip, bLThigh, bRThigh, bLShin, bRShin, bLFoot, bRFoot, bSpine, bNeck, bLClav, bRClav,
  bLUpperArm, bRUpperArm, bLForearm, bRForearm
};

using CanonPose = std::array<Vec3, kCanonJoints>;

struct CanonMotion {
  std::string clip, person;
  double fps = 0;
  double leg_length = 0;            // median hip-knee-ankle length, source units
  std::size_t first_frame = 0;      // frames before it are not motion (an inserted T-pose)
  std::vector<CanonPose> frames;    // source units, Y up
};

// Maps the source joints by name (format-specific alias tables: CMU ASF bone ends;
// cgspeed, Mixamo-style and common BVH names). Throws common::Error naming the clip
// and the missing canonical joint when a clip lacks one.
CanonMotion retarget_to_canonical(const MotionClip& clip);

}  // namespace gait
