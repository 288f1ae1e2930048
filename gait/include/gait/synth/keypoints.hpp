// COCO-17 keypoints of the posed body, and a simulated 2D pose estimator.
//   - 3D points: shoulders, elbows, wrists, hips, knees, ankles from the skeleton;
//     nose, eyes and ears on the head (just inside its surface);
//   - visibility: a point is occluded when the depth image holds a surface nearer than
//     the point's own limb surface (its radius + kOcclusionSlack) at its pixel;
//   - the estimator: per-joint Gaussian jitter and a slowly drifting bias (AR(1)),
//     both scaled with the person's height in pixels and larger when occluded;
//     confidences high when visible and low when occluded; occasional missing joints
//     written as (0, 0, 0) and occasional left/right swaps of a limb pair, more often
//     at side views where left and right look alike;
//   - joints under a garment (the nearest surface at the joint's pixel is a coat or a
//     bag): a heatmap estimator cannot see them and places them between where the body
//     prior puts them and the image evidence, the garment's outline (cover_pull of the
//     way to the nearest outline point); legs hidden under a coat are told apart less
//     often (cover_leg_swap).
#pragma once

#include <array>
#include <cstdint>

#include "gait/pose.hpp"
#include "gait/rng.hpp"
#include "gait/synth/body.hpp"
#include "gait/synth/camera.hpp"
#include "gait/synth/raster.hpp"

namespace gait {

inline constexpr double kOcclusionSlack = 0.03;  // m

struct CocoPoints {
  std::array<Vec3, kCocoJoints> pos;
  std::array<double, kCocoJoints> own_radius;  // m: the limb surface around the point
};
CocoPoints coco_points(const CanonPose& p, const BodyShape& b);

struct EstimatorParams {
  double jitter = 0.005, drift = 0.003;  // fractions of the person's height in pixels
  double miss_visible = 0.002, miss_occluded = 0.03;
  double swap_prob = 0.006;              // per frame, arms or legs alike, x3 near the side views
  // Joints under a coat or bag: the fraction of the way from the true joint to the
  // nearest outline point of the silhouette (0: unaffected, 1: on the outline), and the
  // extra per-frame chance of swapping the legs while a knee is under a coat. Estimates
  // (docs/gait-data.md, "Calibration"): we know of no published per-joint figure for CASIA-B.
  double cover_pull = 0.4;
  double cover_leg_swap = 0.06;
};

// What the estimator did, for tests and reports.
struct EstimatorCounts {
  std::size_t frames = 0, arm_swaps = 0, leg_swaps = 0, covered_joints = 0;
};

class PoseEstimatorSim {
 public:
  PoseEstimatorSim(const EstimatorParams& params, std::uint64_t seed, int view_deg);
  // height_px: the person's height in pixels at this frame.
  PoseFrame observe(const CocoPoints& pts, const Camera& cam, const SdfRaster& r, double height_px,
                    std::array<bool, kCocoJoints>* visible = nullptr);
  const EstimatorCounts& counts() const { return counts_; }

 private:
  void maybe_swap(PoseFrame& f, bool knee_covered);
  EstimatorParams p_;
  Rng rng_;
  double swap_prob_;
  std::array<Vec2, kCocoJoints> drift_{};
  EstimatorCounts counts_;
};

// The nearest point of the silhouette's outline from a pixel inside it, by stepping
// along the signed-distance image's gradient (a union of primitives: a step reaches the
// deepest primitive's boundary, so a few steps reach the union's). Outside: uv itself.
Vec2 nearest_outline_point(const SdfRaster& r, Vec2 uv);

}  // namespace gait
