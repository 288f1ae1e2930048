// BVH: HIERARCHY (ROOT/JOINT/End Site with OFFSET and CHANNELS) then MOTION
// (Frames, Frame Time, one line of channel values per frame).
// Forward kinematics: a joint's local transform is translate(OFFSET + position
// channels) then the rotation channels multiplied in the order listed
// (e.g. "Zrotation Xrotation Yrotation" -> Rz * Rx * Ry), all in degrees.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "gait/motion/clip.hpp"

namespace gait {

struct BvhJoint {
  std::string name;  // End Sites are named "<parent>_end"
  int parent = -1;
  Vec3 offset;
  std::vector<std::string> channels;  // "Xposition", "Zrotation", ...
  bool end_site = false;
  int first_channel = 0;  // index of its first channel in a frame's values
};

struct BvhFile {
  std::vector<BvhJoint> joints;  // depth-first order, parents before children
  int channels = 0;
  double frame_time = 0;
  std::vector<std::vector<double>> frames;  // [frame][channel]
};

// Throws common::Error "file:line: ..." on any syntax error, a short or long frame
// line, a non-numeric value or a frame count that does not match "Frames:".
BvhFile parse_bvh(const std::string& text, const std::string& source);
BvhFile read_bvh_file(const std::filesystem::path& path);
std::string write_bvh(const BvhFile& bvh, int decimals_rotation, int decimals_position);

// The joints the retargeting reads (fingers and eyes dropped; a joint left without
// children ends in an End Site at its first dropped child's offset) and every `step`-th
// frame from the first (the converter's T-pose stays frame 1), the frame time scaled to
// match. Joints stay in depth-first order. Throws when step < 1.
BvhFile trim_bvh(const BvhFile& bvh, int step);

// Positions of every joint for every frame. The first frame counts as an inserted
// rest pose (cgspeed's T-pose) when it jumps to frame 1 far more than later frames move.
MotionClip bvh_to_clip(const BvhFile& bvh, const std::string& name, const std::string& person);

}  // namespace gait
