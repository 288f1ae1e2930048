#include "gait/train/augment.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "gait/pose.hpp"
#include "gait/preprocess.hpp"

namespace gait::train {

namespace {
constexpr int H = kSilHeight, W = kSilWidth, J = kCocoJoints;
constexpr std::size_t kPoseFrame = static_cast<std::size_t>(J) * 3;
}  // namespace

void transform_silhouettes(float* clip, int frames, double angle_deg, double dx, double dy) {
  if (angle_deg == 0 && dx == 0 && dy == 0) return;
  const double a = angle_deg * std::numbers::pi / 180.0, c = std::cos(a), s = std::sin(a);
  const double cy = (H - 1) / 2.0, cx = (W - 1) / 2.0;
  // Output pixel (y, x) samples the input at the inverse transform of (y - dy, x - dx).
  std::vector<float> src(kSilPixels);
  for (int f = 0; f < frames; ++f) {
    float* img = clip + static_cast<std::size_t>(f) * kSilPixels;
    std::copy(img, img + kSilPixels, src.begin());
    for (int y = 0; y < H; ++y) {
      for (int x = 0; x < W; ++x) {
        const double u = x - dx - cx, v = y - dy - cy;
        const double sx = c * u + s * v + cx, sy = -s * u + c * v + cy;
        const int x0 = static_cast<int>(std::floor(sx)), y0 = static_cast<int>(std::floor(sy));
        const double fx = sx - x0, fy = sy - y0;
        auto at = [&](int yy, int xx) -> double {
          return (yy < 0 || yy >= H || xx < 0 || xx >= W) ? 0.0 : src[static_cast<std::size_t>(yy) * W + xx];
        };
        const double v00 = at(y0, x0), v01 = at(y0, x0 + 1), v10 = at(y0 + 1, x0), v11 = at(y0 + 1, x0 + 1);
        img[static_cast<std::size_t>(y) * W + x] =
            static_cast<float>((v00 * (1 - fx) + v01 * fx) * (1 - fy) + (v10 * (1 - fx) + v11 * fx) * fy);
      }
    }
  }
}

void erase_rectangle(float* clip, int frames, int y0, int x0, int h, int w) {
  for (int f = 0; f < frames; ++f) {
    float* img = clip + static_cast<std::size_t>(f) * kSilPixels;
    for (int y = std::max(0, y0); y < std::min(H, y0 + h); ++y)
      for (int x = std::max(0, x0); x < std::min(W, x0 + w); ++x) img[static_cast<std::size_t>(y) * W + x] = 0.0f;
  }
}

void mirror_pose(float* clip, int frames) {
  double cx = 0;
  int n = 0;
  for (int f = 0; f < frames; ++f) {
    const float* p = clip + f * kPoseFrame;
    for (int j : {kLeftHip, kRightHip}) {
      if (p[j * 3 + 2] > 0) {
        cx += p[j * 3];
        ++n;
      }
    }
  }
  cx = n ? cx / n : 0.0;
  std::vector<float> tmp(kPoseFrame);
  for (int f = 0; f < frames; ++f) {
    float* p = clip + f * kPoseFrame;
    std::copy(p, p + kPoseFrame, tmp.begin());
    for (int j = 0; j < J; ++j) {
      const float* q = tmp.data() + kCocoMirror[j] * 3;
      const bool missing = q[2] <= 0 && q[0] == 0 && q[1] == 0;
      p[j * 3 + 0] = missing ? 0.0f : static_cast<float>(2 * cx - q[0]);
      p[j * 3 + 1] = q[1];
      p[j * 3 + 2] = q[2];
    }
  }
}

void time_flip_pose(float* clip, int frames) {
  for (int a = 0, b = frames - 1; a < b; ++a, --b)
    std::swap_ranges(clip + a * kPoseFrame, clip + (a + 1) * kPoseFrame, clip + b * kPoseFrame);
}

void augment_batch(Batch& b, const AugmentConfig& cfg, Rng& rng) {
  if (!cfg.enabled) return;
  for (int i = 0; i < b.n; ++i) {
    // Silhouettes: always draw the same number of values, so the pose draws below do
    // not depend on whether a branch uses them.
    const double angle = rng.uniform(-cfg.sil_rotate_deg, cfg.sil_rotate_deg);
    const double dx = rng.uniform(-cfg.sil_shift_px, cfg.sil_shift_px);
    const double dy = rng.uniform(-cfg.sil_shift_px, cfg.sil_shift_px);
    const bool erase = rng.chance(cfg.sil_erase_p);
    const double area = rng.uniform(0.02, 0.15) * H * W, aspect = std::exp(rng.uniform(std::log(0.3), std::log(3.3)));
    const double ry = rng.uniform(), rx = rng.uniform();
    if (!b.sil.empty()) {
      float* clip = b.sil.data() + static_cast<std::size_t>(i) * b.t * kSilPixels;
      transform_silhouettes(clip, b.t, angle, dx, dy);
      if (erase) {
        const int eh = std::clamp(static_cast<int>(std::lround(std::sqrt(area * aspect))), 1, H);
        const int ew = std::clamp(static_cast<int>(std::lround(std::sqrt(area / aspect))), 1, W);
        erase_rectangle(clip, b.t, static_cast<int>(ry * (H - eh + 1)), static_cast<int>(rx * (W - ew + 1)), eh, ew);
      }
    }
    const bool mirror = rng.chance(cfg.pose_mirror_p), flip = rng.chance(cfg.pose_time_flip_p);
    if (b.pose.empty()) continue;
    float* clip = b.pose.data() + static_cast<std::size_t>(i) * b.t * kPoseFrame;
    if (cfg.pose_noise_px > 0) {
      for (int f = 0; f < b.t; ++f) {
        for (int j = 0; j < J; ++j) {
          float* p = clip + f * kPoseFrame + j * 3;
          const double nx = rng.normal(0, cfg.pose_noise_px), ny = rng.normal(0, cfg.pose_noise_px);
          if (p[2] <= 0) continue;
          p[0] += static_cast<float>(nx);
          p[1] += static_cast<float>(ny);
        }
      }
    }
    if (mirror) mirror_pose(clip, b.t);
    if (flip) time_flip_pose(clip, b.t);
  }
}

}  // namespace gait::train
