#include "gait/synth/camera.hpp"

#include <cmath>

namespace gait {

Camera make_camera(int view_deg, const CameraRig& rig) {
  const double a = view_deg * 3.14159265358979323846 / 180.0;
  Camera c;
  // Ahead of the walker (+X) at 0 deg, on their right (+Z) at 90 deg, behind at 180 deg.
  c.pos = {rig.distance * std::cos(a), rig.height, rig.distance * std::sin(a)};
  const Vec3 target{0, rig.target_height, 0};
  c.fwd = normalized(target - c.pos);
  c.right = normalized(cross(c.fwd, {0, 1, 0}));
  c.down = cross(c.fwd, c.right);
  c.focal = rig.focal;
  c.width = rig.width;
  c.height = rig.height_px;
  c.cx = rig.width / 2.0;
  c.cy = rig.height_px / 2.0;
  return c;
}

}  // namespace gait
