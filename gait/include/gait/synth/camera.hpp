// The CASIA-B recording set-up as a pinhole camera rig: 11 cameras on a half circle
// around the middle of a straight walking path (the walker goes along +X through the
// origin). View 0 deg faces the walker (camera ahead on +X), 90 deg sees them from
// their right side, 180 deg from behind. Frames are 320x240 as CASIA-B's videos.
#pragma once

#include "gait/geometry.hpp"

namespace gait {

struct CameraRig {
  double distance = 4.8;       // m from the path's middle: a 1.7 m person is ~125 px tall
  double height = 1.0;         // m, camera centre above the floor
  double target_height = 0.9;  // m, the point the cameras aim at (the path's middle)
  double focal = 360;          // px: a 48 deg horizontal field of view at 320 px
  int width = 320, height_px = 240;
};

struct Camera {
  Vec3 pos, right, down, fwd;
  double focal = 0, cx = 0, cy = 0;
  int width = 0, height = 0;
  double depth(const Vec3& p) const { return dot(p - pos, fwd); }
  Vec2 project(const Vec3& p) const {
    const Vec3 d = p - pos;
    const double z = std::max(dot(d, fwd), 1e-6);
    return {cx + focal * dot(d, right) / z, cy + focal * dot(d, down) / z};
  }
};

Camera make_camera(int view_deg, const CameraRig& rig = {});

}  // namespace gait
