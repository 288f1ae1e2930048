// Acclaim ASF (skeleton) and AMC (motion), as in the CMU database.
//
// ASF: :units (length multiplier, angle deg|rad), :root (order, axis, position,
// orientation), :bonedata (per bone: name, direction, length, axis a b c ORDER, dof,
// limits), :hierarchy (parent child child ...). Lengths are in (inches * length), so
// metres = value * 0.0254 / length: 0.056444 for CMU's "length 0.45".
// AMC: a frame number line, then "<bone> <values in dof order>" lines.
// Forward kinematics (the Acclaim convention): with C the bone's axis rotation and M
// its motion rotation (both applied X then Y then Z: Rz * Ry * Rx),
//   R_bone = R_parent * C * M * C^-1,  end = start + R_bone * (direction * length).
// Bones missing from a frame keep zero rotation.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "gait/motion/clip.hpp"

namespace gait {

struct AsfBone {
  std::string name;
  int parent = -1;  // index into AsfSkeleton::bones, -1 = root
  Vec3 direction;
  double length = 0;
  Vec3 axis_deg;                  // in `axis_order`
  std::string axis_order = "XYZ";
  std::vector<std::string> dof;  // "rx", "ry", "rz" (translations ignored)
};

struct AsfSkeleton {
  std::string name;
  double length_unit = 1.0;  // the :units length multiplier
  bool degrees = true;
  std::vector<std::string> root_order;  // e.g. TX TY TZ RX RY RZ
  std::string root_axis_order = "XYZ";
  Vec3 root_position, root_orientation;
  std::vector<AsfBone> bones;  // parents before children
  double metres_per_unit() const { return 0.0254 / length_unit; }
  int bone(const std::string& name) const;
};

struct AmcFile {
  std::vector<std::map<std::string, std::vector<double>>> frames;  // bone -> values
  std::vector<std::string> header;  // lines before the first frame (":FULLY-SPECIFIED", ...)
};

AsfSkeleton parse_asf(const std::string& text, const std::string& source);
AsfSkeleton read_asf_file(const std::filesystem::path& path);
AmcFile parse_amc(const std::string& text, const std::string& source);
AmcFile read_amc_file(const std::filesystem::path& path);
std::string write_amc(const AmcFile& amc, const std::vector<std::string>& keep_bones, int decimals_rotation,
                      int decimals_position);

MotionClip amc_to_clip(const AsfSkeleton& asf, const AmcFile& amc, double fps, const std::string& name,
                       const std::string& person);

}  // namespace gait
