// COCO-17 keypoints of the posed body, and a simulated 2D pose estimator.
//   - 3D points: shoulders, elbows, wrists, hips, knees, ankles from the skeleton;
//     nose, eyes and ears on the head (just inside its surface);
//   - visibility: a point is occluded when the depth image holds a surface nearer than
//     the point's own limb surface (its radius + kOcclusionSlack) at its pixel;
//   - the estimator: per-joint Gaussian jitter and a slowly drifting bias (AR(1)),
//     both scaled with the person's height in pixels and larger when occluded;
//     confidences high when visible and low when occluded; occasional missing joints
//     written as (0, 0, 0) and occasional left/right swaps of a limb pair, more often
//     at side views where left and right look alike.
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
  double swap_prob = 0.006;              // per frame, x3 near the side views
};

class PoseEstimatorSim {
 public:
  PoseEstimatorSim(const EstimatorParams& params, std::uint64_t seed, int view_deg);
  // height_px: the person's height in pixels at this frame.
  PoseFrame observe(const CocoPoints& pts, const Camera& cam, const SdfRaster& r, double height_px,
                    std::array<bool, kCocoJoints>* visible = nullptr);

 private:
  EstimatorParams p_;
  Rng rng_;
  double swap_prob_;
  std::array<Vec2, kCocoJoints> drift_{};
};

}  // namespace gait
