// OpenGait's silhouette pretreatment, one frame at a time
// (datasets/pretreatment.py, then BaseSilCuttingTransform at load time):
//   1. drop near-empty frames: foreground mass <= kMinMass;
//   2. crop rows to the person's vertical extent (first to last non-zero row);
//      the full image width is kept;
//   3. resize to height 64 keeping the aspect, width = floor(64 * w / h), bicubic
//      (Keys a = -0.75, half-pixel centres, edge replicate: cv2.INTER_CUBIC);
//   4. centre on the first column where the cumulative column mass exceeds half the
//      total (a centre at column 0 drops the frame, as OpenGait's `if not x_center`);
//   5. take the 64-wide window [c - 32, c + 32), zero-padding 32 columns on each side
//      when it would touch an image border;
//   6. cut 10 columns from each side -> kSilHeight x kSilWidth = 64 x 44.
// Shapes: input [H, W] uint8 gray (any size) -> output [64, 44] uint8.
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "common/png.hpp"

namespace gait {

inline constexpr int kSilHeight = 64;
inline constexpr int kSilWindow = 64;  // the square window before cutting
inline constexpr int kSilCut = 10;     // OpenGait cuts int(64 // 64) * 10 per side
inline constexpr int kSilWidth = kSilWindow - 2 * kSilCut;  // 44
inline constexpr std::size_t kSilPixels = static_cast<std::size_t>(kSilHeight) * kSilWidth;
// OpenGait drops frames with img.sum() <= 10000 on 0/255 images, i.e. fewer than
// about 40 foreground pixels.
inline constexpr long long kMinMass = 10000;

using SilFrame = std::array<std::uint8_t, kSilPixels>;  // [64, 44] row-major

enum class DropReason { None, NearEmpty, NoCentre };

struct PreprocessResult {
  std::optional<SilFrame> frame;
  DropReason dropped = DropReason::None;
};

// img must be single-channel.
PreprocessResult preprocess_silhouette(const common::Image& img);

// Building blocks, exposed for tests.
// Rows [first, last] holding any non-zero pixel; nullopt for an all-zero image.
std::optional<std::pair<int, int>> vertical_extent(const common::Image& img);
// Bicubic resize of a single-channel image (cv2.INTER_CUBIC semantics).
common::Image resize_cubic(const common::Image& img, int out_w, int out_h);
// First column whose cumulative mass exceeds half the total; -1 when none.
int mass_centre_column(const common::Image& img);

}  // namespace gait
