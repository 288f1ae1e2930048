#include "gait/synth/raster.hpp"

#include <algorithm>
#include <cmath>

namespace gait {

SdfRaster::SdfRaster(int width, int height)
    : w_(width), h_(height), sdf_(static_cast<std::size_t>(width) * height, kFar),
      depth_(static_cast<std::size_t>(width) * height, kFar),
      part_(static_cast<std::size_t>(width) * height, static_cast<std::uint8_t>(Part::None)) {}

void SdfRaster::clear() {
  if (box_.empty()) return;
  for (int y = box_.y0; y <= box_.y1; ++y) {
    std::fill_n(sdf_.begin() + static_cast<std::ptrdiff_t>(y) * w_ + box_.x0, box_.x1 - box_.x0 + 1, kFar);
    std::fill_n(depth_.begin() + static_cast<std::ptrdiff_t>(y) * w_ + box_.x0, box_.x1 - box_.x0 + 1, kFar);
    std::fill_n(part_.begin() + static_cast<std::ptrdiff_t>(y) * w_ + box_.x0, box_.x1 - box_.x0 + 1,
                static_cast<std::uint8_t>(Part::None));
  }
  box_ = {};
}

void SdfRaster::draw(const Scene& scene, const Camera& cam) {
  clear();
  body_x0 = body_y0 = 1e9;
  body_x1 = body_y1 = -1e9;
  for (const auto& c : scene.capsules) draw_capsule(c, cam);
  for (const auto& b : scene.boxes) draw_hull(b, cam);
}

namespace {
struct Span {
  int x0, y0, x1, y1;
};
Span clip_span(double x0, double y0, double x1, double y1, int w, int h) {
  return {std::max(0, static_cast<int>(std::floor(x0)) - kRasterMargin),
          std::max(0, static_cast<int>(std::floor(y0)) - kRasterMargin),
          std::min(w - 1, static_cast<int>(std::ceil(x1)) + kRasterMargin),
          std::min(h - 1, static_cast<int>(std::ceil(y1)) + kRasterMargin)};
}
void grow(PixelBox& b, const Span& s) {
  if (s.x1 < s.x0 || s.y1 < s.y0) return;
  if (b.empty()) {
    b = {s.x0, s.y0, s.x1, s.y1};
    return;
  }
  b.x0 = std::min(b.x0, s.x0);
  b.y0 = std::min(b.y0, s.y0);
  b.x1 = std::max(b.x1, s.x1);
  b.y1 = std::max(b.y1, s.y1);
}
}  // namespace

void SdfRaster::draw_capsule(const Capsule& c, const Camera& cam) {
  const double za = cam.depth(c.a), zb = cam.depth(c.b);
  if (za < 0.1 || zb < 0.1) return;  // behind or at the camera
  const Vec2 a = cam.project(c.a), b = cam.project(c.b);
  const double ra = cam.focal * c.ra / za, rb = cam.focal * c.rb / zb;
  const double x0 = std::min(a.x - ra, b.x - rb), x1 = std::max(a.x + ra, b.x + rb);
  const double y0 = std::min(a.y - ra, b.y - rb), y1 = std::max(a.y + ra, b.y + rb);
  if (c.part != Part::Shadow) {
    body_x0 = std::min(body_x0, x0);
    body_x1 = std::max(body_x1, x1);
    body_y0 = std::min(body_y0, y0);
    body_y1 = std::max(body_y1, y1);
  }
  const Span s = clip_span(x0, y0, x1, y1, w_, h_);
  grow(box_, s);
  const double ex = b.x - a.x, ey = b.y - a.y, len2 = std::max(ex * ex + ey * ey, 1e-9);
  for (int y = s.y0; y <= s.y1; ++y) {
    const double py = y + 0.5 - a.y;
    for (int x = s.x0; x <= s.x1; ++x) {
      const double px = x + 0.5 - a.x;
      const double t = std::clamp((px * ex + py * ey) / len2, 0.0, 1.0);
      const double dx = px - t * ex, dy = py - t * ey, r = ra + t * (rb - ra), d2 = dx * dx + dy * dy;
      const std::size_t i = static_cast<std::size_t>(y) * w_ + x;
      // Most of a slanted limb's box is far outside it: compare squares before the root.
      // Skip unless the pixel is inside (depth) or nearer than the current distance.
      const double reach = r + std::max(sdf_[i], 0.0f);
      if (d2 >= reach * reach) continue;
      const float d = static_cast<float>(std::sqrt(d2) - r);
      if (d < sdf_[i]) sdf_[i] = d;
      if (d < 0) {
        const float z = static_cast<float>(za + t * (zb - za) - (c.ra + t * (c.rb - c.ra)));
        if (z < depth_[i]) {
          depth_[i] = z;
          part_[i] = static_cast<std::uint8_t>(c.part);
        }
      }
    }
  }
}

void SdfRaster::draw_hull(const Box& bx, const Camera& cam) {
  std::vector<Vec2> pts;
  double zmin = 1e9;
  for (const auto& c : bx.corners) {
    const double z = cam.depth(c);
    if (z < 0.1) return;
    zmin = std::min(zmin, z);
    pts.push_back(cam.project(c));
  }
  // Andrew's monotone chain: counter-clockwise hull (in image coordinates).
  std::sort(pts.begin(), pts.end(), [](const Vec2& p, const Vec2& q) { return p.x < q.x || (p.x == q.x && p.y < q.y); });
  auto turn = [](const Vec2& o, const Vec2& p, const Vec2& q) { return (p.x - o.x) * (q.y - o.y) - (p.y - o.y) * (q.x - o.x); };
  std::vector<Vec2> hull(2 * pts.size());
  std::size_t k = 0;
  for (std::size_t i = 0; i < pts.size(); ++i) {
    while (k >= 2 && turn(hull[k - 2], hull[k - 1], pts[i]) <= 0) --k;
    hull[k++] = pts[i];
  }
  for (std::size_t i = pts.size() - 1, t = k + 1; i-- > 0;) {
    while (k >= t && turn(hull[k - 2], hull[k - 1], pts[i]) <= 0) --k;
    hull[k++] = pts[i];
  }
  hull.resize(k > 1 ? k - 1 : k);
  if (hull.size() < 3) return;
  double x0 = 1e9, x1 = -1e9, y0 = 1e9, y1 = -1e9;
  for (const auto& p : hull) {
    x0 = std::min(x0, p.x);
    x1 = std::max(x1, p.x);
    y0 = std::min(y0, p.y);
    y1 = std::max(y1, p.y);
  }
  if (bx.part != Part::Shadow) {
    body_x0 = std::min(body_x0, x0);
    body_x1 = std::max(body_x1, x1);
    body_y0 = std::min(body_y0, y0);
    body_y1 = std::max(body_y1, y1);
  }
  const Span s = clip_span(x0, y0, x1, y1, w_, h_);
  grow(box_, s);
  const float depth = bx.part == Part::Shadow ? kFar : static_cast<float>(zmin);
  for (int y = s.y0; y <= s.y1; ++y)
    for (int x = s.x0; x <= s.x1; ++x) {
      const double px = x + 0.5, py = y + 0.5;
      bool inside = true;
      double dmin = 1e9;
      for (std::size_t i = 0; i < hull.size(); ++i) {
        const Vec2& p = hull[i];
        const Vec2& q = hull[(i + 1) % hull.size()];
        const double ex = q.x - p.x, ey = q.y - p.y, len = std::sqrt(ex * ex + ey * ey);
        if (len < 1e-9) continue;
        const double side = (ex * (py - p.y) - ey * (px - p.x)) / len;  // > 0: inside (CCW)
        if (side < 0) inside = false;
        const double t = std::clamp(((px - p.x) * ex + (py - p.y) * ey) / (len * len), 0.0, 1.0);
        const double qx = px - p.x - t * ex, qy = py - p.y - t * ey;
        dmin = std::min(dmin, qx * qx + qy * qy);
      }
      const float d = static_cast<float>(inside ? -std::sqrt(dmin) : std::sqrt(dmin));
      const std::size_t i = static_cast<std::size_t>(y) * w_ + x;
      if (d < sdf_[i]) sdf_[i] = d;
      if (d < 0 && depth < depth_[i]) {
        depth_[i] = depth;
        part_[i] = static_cast<std::uint8_t>(bx.part);
      }
    }
}

}  // namespace gait
