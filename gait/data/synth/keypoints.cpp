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

Vec2 nearest_outline_point(const SdfRaster& r, Vec2 uv) {
  auto sdf = [&](int x, int y) {
    return static_cast<double>(r.sdf(std::clamp(x, 0, r.width() - 1), std::clamp(y, 0, r.height() - 1)));
  };
  for (int step = 0; step < 6; ++step) {
    const int x = static_cast<int>(std::floor(uv.x)), y = static_cast<int>(std::floor(uv.y));
    if (x < 0 || y < 0 || x >= r.width() || y >= r.height()) break;
    const double d = sdf(x, y);
    if (d >= 0) break;
    const double gx = sdf(x + 1, y) - sdf(x - 1, y), gy = sdf(x, y + 1) - sdf(x, y - 1);
    const double g = std::sqrt(gx * gx + gy * gy);
    if (g < 1e-6) break;
    uv.x += gx / g * (0.5 - d);  // half a pixel past the boundary, so the loop ends there
    uv.y += gy / g * (0.5 - d);
  }
  return uv;
}

PoseFrame PoseEstimatorSim::observe(const CocoPoints& pts, const Camera& cam, const SdfRaster& r, double height_px,
                                    std::array<bool, kCocoJoints>* visible_out) {
  PoseFrame f;
  bool knee_covered = false;
  ++counts_.frames;
  for (int j = 0; j < kCocoJoints; ++j) {
    Vec2 uv = cam.project(pts.pos[j]);
    const int px = static_cast<int>(std::floor(uv.x)), py = static_cast<int>(std::floor(uv.y));
    bool visible = true, covered = false;
    if (px >= 0 && py >= 0 && px < r.width() && py < r.height()) {
      visible = r.depth(px, py) >= cam.depth(pts.pos[j]) - pts.own_radius[j] - kOcclusionSlack;
      // A coat or bag is opaque: whatever lies under it is hidden, however thin it is.
      const Part seen = r.part(px, py);
      covered = seen == Part::Coat || seen == Part::Bag;
    }
    if (covered) {
      visible = false;
      ++counts_.covered_joints;
      knee_covered |= (j == kLeftKnee || j == kRightKnee) && r.part(px, py) == Part::Coat;
      const Vec2 edge = nearest_outline_point(r, uv);
      uv.x += p_.cover_pull * (edge.x - uv.x);
      uv.y += p_.cover_pull * (edge.y - uv.y);
    }
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
  maybe_swap(f, knee_covered);
  return f;
}

void PoseEstimatorSim::maybe_swap(PoseFrame& f, bool knee_covered) {
  // At most one limb pair per frame: arms (shoulder..wrist) or legs (hip..ankle).
  const double arms = 0.5 * swap_prob_, legs = 0.5 * swap_prob_ + (knee_covered ? p_.cover_leg_swap : 0.0);
  const double u = rng_.uniform();
  if (u >= arms + legs) return;
  const bool swap_legs = u >= arms;
  ++(swap_legs ? counts_.leg_swaps : counts_.arm_swaps);
  const int first = swap_legs ? kLeftHip : kLeftShoulder;
  for (int j = first; j < first + 6; j += 2) std::swap(f[j], f[j + 1]);
}

}  // namespace gait
