#include "gait/preprocess.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/check.hpp"

namespace gait {

std::optional<std::pair<int, int>> vertical_extent(const common::Image& img) {
  int first = -1, last = -1;
  for (int y = 0; y < img.height; ++y) {
    const std::uint8_t* row = img.pixels.data() + static_cast<std::size_t>(y) * img.width;
    if (std::any_of(row, row + img.width, [](std::uint8_t v) { return v != 0; })) {
      if (first < 0) first = y;
      last = y;
    }
  }
  if (first < 0) return std::nullopt;
  return std::pair{first, last};
}

namespace {

// Keys cubic convolution weights with a = -0.75 (OpenCV's choice) for offset t in [0, 1).
std::array<double, 4> cubic_weights(double t) {
  constexpr double a = -0.75;
  const double x0 = 1 + t, x1 = t, x2 = 1 - t, x3 = 2 - t;
  auto far = [](double x) { return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a; };
  auto near = [](double x) { return ((a + 2) * x - (a + 3)) * x * x + 1; };
  return {far(x0), near(x1), near(x2), far(x3)};
}

struct Taps {
  std::vector<int> index;       // 4 per output sample
  std::vector<double> weight;   // 4 per output sample
};

Taps make_taps(int src, int dst) {
  Taps t;
  t.index.resize(static_cast<std::size_t>(dst) * 4);
  t.weight.resize(static_cast<std::size_t>(dst) * 4);
  const double scale = static_cast<double>(src) / dst;
  for (int d = 0; d < dst; ++d) {
    const double f = (d + 0.5) * scale - 0.5;
    const int s = static_cast<int>(std::floor(f));
    const auto w = cubic_weights(f - s);
    for (int k = 0; k < 4; ++k) {
      t.index[d * 4 + k] = std::clamp(s - 1 + k, 0, src - 1);
      t.weight[d * 4 + k] = w[k];
    }
  }
  return t;
}

}  // namespace

common::Image resize_cubic(const common::Image& img, int out_w, int out_h) {
  XS_ASSERT(img.channels == 1, "resize_cubic needs a single-channel image");
  XS_ASSERT(out_w > 0 && out_h > 0, "resize_cubic: bad output size {}x{}", out_w, out_h);
  const Taps tx = make_taps(img.width, out_w), ty = make_taps(img.height, out_h);
  // Horizontal pass: [H, W] -> [H, out_w] in double, then vertical: -> [out_h, out_w].
  std::vector<double> tmp(static_cast<std::size_t>(img.height) * out_w);
  for (int y = 0; y < img.height; ++y) {
    const std::uint8_t* row = img.pixels.data() + static_cast<std::size_t>(y) * img.width;
    for (int x = 0; x < out_w; ++x) {
      double acc = 0;
      for (int k = 0; k < 4; ++k) acc += tx.weight[x * 4 + k] * row[tx.index[x * 4 + k]];
      tmp[static_cast<std::size_t>(y) * out_w + x] = acc;
    }
  }
  common::Image out = common::Image::blank(out_w, out_h, 1);
  for (int y = 0; y < out_h; ++y)
    for (int x = 0; x < out_w; ++x) {
      double acc = 0;
      for (int k = 0; k < 4; ++k) acc += ty.weight[y * 4 + k] * tmp[static_cast<std::size_t>(ty.index[y * 4 + k]) * out_w + x];
      out.at(y, x) = static_cast<std::uint8_t>(std::clamp(std::lround(acc), 0L, 255L));
    }
  return out;
}

int mass_centre_column(const common::Image& img) {
  std::vector<long long> col(static_cast<std::size_t>(img.width), 0);
  long long total = 0;
  for (int y = 0; y < img.height; ++y)
    for (int x = 0; x < img.width; ++x) col[x] += img.at(y, x);
  for (long long c : col) total += c;
  long long csum = 0;
  for (int x = 0; x < img.width; ++x) {
    csum += col[x];
    // OpenGait compares the running sum with img.sum() / 2 in floating point.
    if (2 * csum > total) return x;
  }
  return -1;
}

PreprocessResult preprocess_silhouette(const common::Image& img) {
  XS_ASSERT(img.channels == 1, "silhouettes must be single-channel");
  long long mass = 0;
  for (std::uint8_t v : img.pixels) mass += v;
  if (mass <= kMinMass) return {std::nullopt, DropReason::NearEmpty};
  const auto extent = vertical_extent(img);
  if (!extent) return {std::nullopt, DropReason::NearEmpty};
  const int rows = extent->second - extent->first + 1;
  common::Image crop = common::Image::blank(img.width, rows, 1);
  std::copy_n(img.pixels.begin() + static_cast<std::ptrdiff_t>(extent->first) * img.width,
              static_cast<std::size_t>(rows) * img.width, crop.pixels.begin());
  const int out_w = static_cast<int>(static_cast<double>(kSilHeight) * img.width / rows);
  if (out_w < 1) return {std::nullopt, DropReason::NoCentre};
  const common::Image r = resize_cubic(crop, out_w, kSilHeight);
  const int centre = mass_centre_column(r);
  if (centre <= 0) return {std::nullopt, DropReason::NoCentre};
  // OpenGait zero-pads 32 columns on both sides when the window would touch a border;
  // reading the window from the unpadded image with zeros outside is the same thing.
  const int left = centre - kSilWindow / 2;
  PreprocessResult res;
  SilFrame& f = res.frame.emplace();
  for (int y = 0; y < kSilHeight; ++y)
    for (int x = 0; x < kSilWidth; ++x) {
      const int sx = left + kSilCut + x;
      f[static_cast<std::size_t>(y) * kSilWidth + x] = (sx >= 0 && sx < r.width) ? r.at(y, sx) : 0;
    }
  return res;
}

}  // namespace gait
