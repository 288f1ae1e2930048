#include "draw.hpp"

#include <algorithm>
#include <cmath>

namespace gait::detail {

namespace {
void put(common::Image& img, int x, int y, Rgb c) {
  if (x < 0 || y < 0 || x >= img.width || y >= img.height) return;
  for (int k = 0; k < 3; ++k) img.at(y, x, k) = c[k];
}
}  // namespace

void draw_dot(common::Image& img, double cx, double cy, double r, Rgb c) {
  for (int y = static_cast<int>(std::floor(cy - r)); y <= static_cast<int>(std::ceil(cy + r)); ++y)
    for (int x = static_cast<int>(std::floor(cx - r)); x <= static_cast<int>(std::ceil(cx + r)); ++x)
      if (std::hypot(x + 0.5 - cx, y + 0.5 - cy) <= r) put(img, x, y, c);
}

void draw_line(common::Image& img, double x0, double y0, double x1, double y1, double width, Rgb c) {
  const double len = std::hypot(x1 - x0, y1 - y0);
  const int steps = std::max(1, static_cast<int>(std::ceil(len * 2)));
  for (int i = 0; i <= steps; ++i) {
    const double t = static_cast<double>(i) / steps;
    draw_dot(img, x0 + t * (x1 - x0), y0 + t * (y1 - y0), width / 2, c);
  }
}

}  // namespace gait::detail
