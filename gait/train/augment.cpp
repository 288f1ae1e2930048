#include "gait/train/augment.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "common/parallel.hpp"
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
  // The transform is the clip's, so the bilinear taps (four source indices, -1 outside
  // the image, and the two fractions) are worked out once and applied to every frame.
  struct Tap {
    int i00, i01, i10, i11;
    double fx, fy;
  };
  std::vector<Tap> taps(kSilPixels);
  for (int y = 0; y < H; ++y) {
    for (int x = 0; x < W; ++x) {
      const double u = x - dx - cx, v = y - dy - cy;
      const double sx = c * u + s * v + cx, sy = -s * u + c * v + cy;
      const int x0 = static_cast<int>(std::floor(sx)), y0 = static_cast<int>(std::floor(sy));
      auto index = [](int yy, int xx) { return (yy < 0 || yy >= H || xx < 0 || xx >= W) ? -1 : yy * W + xx; };
      taps[static_cast<std::size_t>(y) * W + x] = {index(y0, x0),     index(y0, x0 + 1), index(y0 + 1, x0),
                                                   index(y0 + 1, x0 + 1), sx - x0,           sy - y0};
    }
  }
  std::vector<float> src(kSilPixels);
  for (int f = 0; f < frames; ++f) {
    float* img = clip + static_cast<std::size_t>(f) * kSilPixels;
    std::copy(img, img + kSilPixels, src.begin());
    auto at = [&](int i) -> double { return i < 0 ? 0.0 : src[static_cast<std::size_t>(i)]; };
    for (std::size_t p = 0; p < kSilPixels; ++p) {
      const Tap& t = taps[p];
      const double v00 = at(t.i00), v01 = at(t.i01), v10 = at(t.i10), v11 = at(t.i11);
      img[p] = static_cast<float>((v00 * (1 - t.fx) + v01 * t.fx) * (1 - t.fy) + (v10 * (1 - t.fx) + v11 * t.fx) * t.fy);
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

void augment_batch(Batch& b, const AugmentConfig& cfg, Rng& rng, int threads) {
  if (!cfg.enabled) return;
  // The random draws stay sequential, sample by sample, in one fixed order (so a batch
  // is a function of the seed whatever the thread count); the silhouette warps, the
  // costly part, run afterwards on up to `threads` threads, one clip per task.
  struct SilWork {
    double angle, dx, dy;
    bool erase;
    int ey, ex, eh, ew;
  };
  std::vector<SilWork> sil_work;
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
      const int eh = std::clamp(static_cast<int>(std::lround(std::sqrt(area * aspect))), 1, H);
      const int ew = std::clamp(static_cast<int>(std::lround(std::sqrt(area / aspect))), 1, W);
      sil_work.push_back({angle, dx, dy, erase, static_cast<int>(ry * (H - eh + 1)), static_cast<int>(rx * (W - ew + 1)),
                          eh, ew});
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
  auto warp = [&](std::size_t i) {
    const SilWork& w = sil_work[i];
    float* clip = b.sil.data() + i * b.t * kSilPixels;
    transform_silhouettes(clip, b.t, w.angle, w.dx, w.dy);
    if (w.erase) erase_rectangle(clip, b.t, w.ey, w.ex, w.eh, w.ew);
  };
  common::parallel_for(sil_work.size(), std::max(1, threads), warp);
}

}  // namespace gait::train
