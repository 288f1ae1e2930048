#include "gait/synth/keypoints.hpp"

#include <algorithm>
#include <cmath>

#include "gait/synth/scene.hpp"

namespace gait {

CocoPoints coco_points(const CanonPose& p, const BodyShape& b) {
  CocoPoints c;
  const HeadFrame h = head_frame(p, b);
  const double r = b.head_radius;
  c.pos[kNose] = h.centre + h.fwd * (0.8 * r) - h.up * (0.15 * r);
  c.pos[kLeftEye] = h.centre + h.fwd * (0.68 * r) - h.right * (0.32 * r) + h.up * (0.12 * r);
  c.pos[kRightEye] = h.centre + h.fwd * (0.68 * r) + h.right * (0.32 * r) + h.up * (0.12 * r);
  c.pos[kLeftEar] = h.centre - h.right * (0.85 * r) - h.fwd * (0.05 * r);
  c.pos[kRightEar] = h.centre + h.right * (0.85 * r) - h.fwd * (0.05 * r);
  const int canon[12] = {cLShoulder, cRShoulder, cLElbow, cRElbow, cLWrist, cRWrist,
                         cLHip,      cRHip,      cLKnee,  cRKnee,  cLAnkle, cRAnkle};
  for (int i = 0; i < 12; ++i) c.pos[kLeftShoulder + i] = p[canon[i]];
  const double k = b.height / 1.70;
  const double radius[kCocoJoints] = {0, 0, 0, 0, 0, 0.08, 0.08, 0.045, 0.045, 0.03, 0.03, 0.10, 0.10, 0.06, 0.06, 0.04, 0.04};
  for (int j = 0; j < kCocoJoints; ++j) c.own_radius[j] = radius[j] * k;
  return c;
}

PoseEstimatorSim::PoseEstimatorSim(const EstimatorParams& params, std::uint64_t seed, int view_deg)
    : p_(params), rng_(seed) {
  // Left and right are hardest to tell apart when the walker is seen from the side.
  const double side = std::abs(std::sin(view_deg * 3.14159265358979323846 / 180.0));
  swap_prob_ = p_.swap_prob * (1 + 2 * side);
}

PoseFrame PoseEstimatorSim::observe(const CocoPoints& pts, const Camera& cam, const SdfRaster& r, double height_px,
                                    std::array<bool, kCocoJoints>* visible_out) {
  PoseFrame f;
  for (int j = 0; j < kCocoJoints; ++j) {
    const Vec2 uv = cam.project(pts.pos[j]);
    const int px = static_cast<int>(std::floor(uv.x)), py = static_cast<int>(std::floor(uv.y));
    bool visible = true;
    if (px >= 0 && py >= 0 && px < r.width() && py < r.height())
      visible = r.depth(px, py) >= cam.depth(pts.pos[j]) - pts.own_radius[j] - kOcclusionSlack;
    if (visible_out) (*visible_out)[j] = visible;
    drift_[j].x = 0.8 * drift_[j].x + rng_.normal() * p_.drift * height_px;
    drift_[j].y = 0.8 * drift_[j].y + rng_.normal() * p_.drift * height_px;
    const double sd = (visible ? 1.0 : 2.5) * p_.jitter * height_px;
    Keypoint& k = f[j];
    k.x = static_cast<float>(uv.x + drift_[j].x + rng_.normal() * sd);
    k.y = static_cast<float>(uv.y + drift_[j].y + rng_.normal() * sd);
    k.conf = static_cast<float>(visible ? std::clamp(rng_.normal(0.88, 0.06), 0.5, 0.99)
                                        : std::clamp(rng_.normal(0.45, 0.15), 0.05, 0.8));
    if (rng_.chance(visible ? p_.miss_visible : p_.miss_occluded)) k = {0, 0, 0};
  }
  if (rng_.chance(swap_prob_)) {
    // Swap one limb pair: arms (shoulder..wrist) or legs (hip..ankle).
    const bool legs = rng_.chance(0.5);
    const int first = legs ? kLeftHip : kLeftShoulder;
    for (int j = first; j < first + 6; j += 2) std::swap(f[j], f[j + 1]);
  }
  return f;
}

}  // namespace gait
