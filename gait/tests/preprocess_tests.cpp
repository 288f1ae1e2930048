// Preprocessing on hand-made images with known crop/centre results.
#include <gtest/gtest.h>

#include "gait/preprocess.hpp"

namespace gait {
namespace {

common::Image frame_with_rect(int x0, int x1, int y0, int y1) {  // inclusive bounds
  auto img = common::Image::blank(320, 240, 1);
  for (int y = y0; y <= y1; ++y)
    for (int x = x0; x <= x1; ++x) img.at(y, x) = 255;
  return img;
}

int column_mass(const SilFrame& f, int x) {
  int m = 0;
  for (int y = 0; y < kSilHeight; ++y) m += f[y * kSilWidth + x];
  return m;
}

TEST(Preprocess, OutputShapeIs64x44) {
  EXPECT_EQ(kSilHeight, 64);
  EXPECT_EQ(kSilWidth, 44);
}

TEST(Preprocess, VerticalExtent) {
  const auto img = frame_with_rect(10, 20, 37, 180);
  const auto e = vertical_extent(img);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->first, 37);
  EXPECT_EQ(e->second, 180);
  EXPECT_FALSE(vertical_extent(common::Image::blank(8, 8, 1)));
}

TEST(Preprocess, ResizeAtScaleOneIsIdentityAndConstantsStayConstant) {
  auto img = common::Image::blank(7, 5, 1);
  for (std::size_t i = 0; i < img.pixels.size(); ++i) img.pixels[i] = static_cast<std::uint8_t>(i * 7);
  EXPECT_EQ(resize_cubic(img, 7, 5).pixels, img.pixels);
  const auto flat = common::Image::blank(50, 90, 1, 200);
  for (auto v : resize_cubic(flat, 13, 64).pixels) EXPECT_EQ(v, 200);
}

// A 10x64 bar: the crop is already 64 high, so the resize is the identity (width
// floor(64 * 320 / 64) = 320). Column masses: the cumulative sum first exceeds half
// at the bar's 6th column (150 + 5 = 155), the window starts at 155 - 32 = 123, and the
// cut removes 10 more: output column x shows input column 133 + x, so the bar lands
// on columns 17..26 of every row.
TEST(Preprocess, KnownCropAndCentre) {
  const auto r = preprocess_silhouette(frame_with_rect(150, 159, 100, 163));
  ASSERT_TRUE(r.frame);
  for (int y = 0; y < kSilHeight; ++y)
    for (int x = 0; x < kSilWidth; ++x)
      EXPECT_EQ((*r.frame)[y * kSilWidth + x], (x >= 17 && x <= 26) ? 255 : 0) << "y=" << y << " x=" << x;
}

// The same bar against the left border: the window would start at column -27, so
// OpenGait pads 32 zero columns; the bar still lands on columns 17..26.
TEST(Preprocess, BorderPaddingKeepsThePersonCentred) {
  const auto r = preprocess_silhouette(frame_with_rect(0, 9, 10, 73));
  ASSERT_TRUE(r.frame);
  for (int x = 0; x < kSilWidth; ++x) EXPECT_EQ(column_mass(*r.frame, x), (x >= 17 && x <= 26) ? 64 * 255 : 0) << x;
}

// A 20x128 bar halves in size: full height, centred (mass balanced around column 21/22).
TEST(Preprocess, DownscaledBarIsFullHeightAndCentred) {
  const auto r = preprocess_silhouette(frame_with_rect(100, 119, 50, 177));
  ASSERT_TRUE(r.frame);
  const SilFrame& f = *r.frame;
  for (int y = 0; y < kSilHeight; ++y) EXPECT_GT(f[y * kSilWidth + 22], 200) << y;
  long long left = 0, right = 0;
  for (int x = 0; x < kSilWidth; ++x) (x < 22 ? left : right) += column_mass(f, x);
  EXPECT_NEAR(static_cast<double>(left) / static_cast<double>(left + right), 0.5, 0.12);
  int cols = 0;
  for (int x = 0; x < kSilWidth; ++x) cols += column_mass(f, x) > 0;
  EXPECT_GE(cols, 10);
  EXPECT_LE(cols, 12);
}

TEST(Preprocess, NearEmptyFramesAreDropped) {
  auto img = common::Image::blank(320, 240, 1);
  for (int i = 0; i < 39; ++i) img.at(100 + i, 100) = 255;  // 39 * 255 = 9945 <= 10000
  auto r = preprocess_silhouette(img);
  EXPECT_FALSE(r.frame);
  EXPECT_EQ(r.dropped, DropReason::NearEmpty);
  img.at(150, 100) = 255;  // 40 pixels: 10200 > 10000
  EXPECT_TRUE(preprocess_silhouette(img).frame);
}

TEST(Preprocess, CentreAtColumnZeroIsDropped) {
  // OpenGait's `if not x_center: continue` also drops a centre at column 0.
  const auto r = preprocess_silhouette(frame_with_rect(0, 0, 0, 63));
  EXPECT_FALSE(r.frame);
  EXPECT_EQ(r.dropped, DropReason::NoCentre);
}

TEST(Preprocess, MassCentreColumn) {
  auto img = common::Image::blank(10, 2, 1);
  img.at(0, 2) = 100;
  img.at(1, 7) = 100;
  EXPECT_EQ(mass_centre_column(img), 7);  // at column 2 the sum equals half: not past it
  EXPECT_EQ(mass_centre_column(common::Image::blank(4, 4, 1)), -1);
}

}  // namespace
}  // namespace gait
