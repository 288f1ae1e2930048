// Minimal RGB drawing for the sample strips (strip.cpp): thick lines and filled dots.
#pragma once

#include <array>
#include <cstdint>

#include "common/png.hpp"

namespace gait::detail {

using Rgb = std::array<std::uint8_t, 3>;

void draw_dot(common::Image& img, double x, double y, double r, Rgb c);
void draw_line(common::Image& img, double x0, double y0, double x1, double y1, double width, Rgb c);

}  // namespace gait::detail
