// Rasterising a Scene seen by a Camera into a signed-distance image (pixels; negative
// inside the body), a depth image (m; the nearest surface) and a part image (which
// Part that nearest surface belongs to: what the camera sees there), restricted to the
// person's bounding box so a frame costs little more than the pixels it covers.
// Capsules project as 2D tapered capsules (endpoints projected, radii scaled by
// focal / depth): exact enough at walking-path distances where a limb spans a few
// degrees. Boxes and flat polygons project as the convex hull of their corners.
#pragma once

#include <vector>

#include "gait/synth/camera.hpp"
#include "gait/synth/scene.hpp"

namespace gait {

struct PixelBox {
  int x0 = 0, y0 = 0, x1 = -1, y1 = -1;  // inclusive; empty when x1 < x0
  bool empty() const { return x1 < x0 || y1 < y0; }
};

class SdfRaster {
 public:
  SdfRaster(int width, int height);
  // Clears the previous box and draws the scene.
  void draw(const Scene& scene, const Camera& cam);
  float sdf(int x, int y) const { return sdf_[static_cast<std::size_t>(y) * w_ + x]; }
  float depth(int x, int y) const { return depth_[static_cast<std::size_t>(y) * w_ + x]; }
  Part part(int x, int y) const { return static_cast<Part>(part_[static_cast<std::size_t>(y) * w_ + x]); }
  const PixelBox& box() const { return box_; }  // where anything was drawn (with margin)
  int width() const { return w_; }
  int height() const { return h_; }
  // The 2D extent of the body itself (shadow excluded), in pixels; unclipped.
  double body_x0 = 0, body_x1 = 0, body_y0 = 0, body_y1 = 0;

 private:
  void clear();
  void draw_capsule(const Capsule& c, const Camera& cam);
  void draw_hull(const Box& b, const Camera& cam);
  int w_, h_;
  std::vector<float> sdf_, depth_;
  std::vector<std::uint8_t> part_;  // Part of the nearest surface; Part::None where nothing is
  PixelBox box_;
};

// A margin beyond every shape so edge noise of a few pixels has room.
inline constexpr int kRasterMargin = 4;
inline constexpr float kFar = 1e9f;

}  // namespace gait
