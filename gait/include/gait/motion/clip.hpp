// A motion-capture clip after forward kinematics: world positions of every joint of
// the source skeleton, frame by frame. Both readers (BVH, ASF/AMC) produce this, so
// retargeting and gait-cycle cutting do not care which format a clip came from.
#pragma once

#include <string>
#include <vector>

#include "gait/geometry.hpp"

namespace gait {

struct MotionClip {
  std::string name;    // file stem, e.g. "07_01"
  std::string person;  // the captured person (the subject folder), e.g. "07"
  std::string format;  // "bvh" or "asf-amc"
  std::string description;  // the capture's label from the folder's MANIFEST ("walk", "slow walk"), or empty
  double fps = 0;
  double metres_per_unit = 0;  // 0.01 for centimetre BVH, 0.0254 / length for ASF
  bool first_frame_is_rest_pose = false;  // cgspeed BVH files start with an added T-pose
  std::vector<std::string> joint_names;   // BVH joints and "<joint>_end" sites; ASF "root" and bone ends
  std::vector<int> parents;               // -1 for the root
  std::vector<std::vector<Vec3>> frames;  // [frame][joint], source units, Y up

  int joint(const std::string& name) const;  // -1 when absent (case-insensitive)
  std::size_t first_motion_frame() const { return first_frame_is_rest_pose ? 1 : 0; }
};

}  // namespace gait
