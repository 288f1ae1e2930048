// Segmentation noise: what background subtraction does to a clean silhouette.
//   - ragged edges: the boundary moves by smooth value noise (amplitude edge_amp px,
//     feature size edge_scale px), redrawn every frame, so edges flicker as in CASIA-B;
//   - holes: occasional small elliptical gaps inside the body (clothing that matches
//     the background);
//   - shadows at the feet: a flat polygon on the floor from the feet away from the
//     light, in some sequences;
//   - specks: occasional small false-positive blobs near the feet;
//   - failures: rare frames where almost nothing was segmented (dropped by preprocessing).
// Parameters vary per sequence view, like lighting and clothing do.
#pragma once

#include <array>
#include <cstdint>

#include "common/png.hpp"
#include "gait/rng.hpp"
#include "gait/synth/raster.hpp"

namespace gait {

struct SegNoiseParams {
  double edge_amp = 0.8, edge_scale = 3.0;  // px
  double hole_prob = 0.1, speck_prob = 0.05, failure_prob = 0.004;  // per frame
  bool shadow = false;
  double light_azimuth = 0, shadow_length = 0.3;  // rad, m
};
SegNoiseParams sample_seg_noise(Rng& rng);

// Adds the floor shadow polygon for this pose (no-op when params.shadow is false).
void add_shadow(Scene& scene, const CanonPose& pose, const SegNoiseParams& params);

class SegNoise {
 public:
  SegNoise(const SegNoiseParams& params, std::uint64_t seed);
  // Thresholds the raster with noise into a 0/255 image of the raster's size.
  void render(const SdfRaster& r, common::Image& out);

 private:
  static constexpr int kLattice = 32;
  double value_noise(double x, double y) const;
  SegNoiseParams p_;
  Rng rng_;
  std::array<float, kLattice * kLattice> lattice_{};
  double ox_ = 0, oy_ = 0;
};

}  // namespace gait
