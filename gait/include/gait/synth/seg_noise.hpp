// Segmentation noise: what background subtraction does to a clean silhouette.
//   - ragged edges: the boundary moves by smooth value noise (amplitude edge_amp px,
//     feature size edge_scale px), redrawn every frame, so edges flicker as in CASIA-B;
//   - holes: occasional small elliptical gaps inside the body (flicker of single frames);
//   - camouflage: in some sequence views one garment (the top or coat, or the trousers)
//     is close to the background's colour, so background subtraction loses it where the
//     wall behind it matches best: pixels of that garment (by the raster's part image)
//     vanish where a smooth field, fixed to the image like the background, exceeds a
//     threshold; the same patches of wall take bites out of every frame that passes them;
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

inline constexpr double kCamoProb = 0.3;  // sequence views with one matching garment (an estimate)

enum class Garment : int { None, Top, Trousers };  // Top: torso and sleeves, and a coat

struct SegNoiseParams {
  double edge_amp = 0.8, edge_scale = 3.0;  // px
  double hole_prob = 0.1, speck_prob = 0.05, failure_prob = 0.004;  // per frame
  bool shadow = false;
  double light_azimuth = 0, shadow_length = 0.3;  // rad, m
  Garment camo = Garment::None;   // the garment that matches the background, if any
  double camo_level = 0.5;        // field threshold in (-1, 1): higher loses less
  double camo_scale = 16;         // px: size of the matching patches of background
};
SegNoiseParams sample_seg_noise(Rng& rng, double camo_prob = kCamoProb);

// Adds the floor shadow polygon for this pose (no-op when params.shadow is false).
void add_shadow(Scene& scene, const CanonPose& pose, const SegNoiseParams& params);

class SegNoise {
 public:
  SegNoise(const SegNoiseParams& params, std::uint64_t seed);
  // Thresholds the raster with noise into a 0/255 image of the raster's size.
  void render(const SdfRaster& r, common::Image& out);

 private:
  static constexpr int kLattice = 32;
  // Smooth value noise in [-1, 1] at (x, y) px with feature size `scale`, shifted by (ox, oy) cells.
  double value_noise(double x, double y, double scale, double ox, double oy) const;
  bool camouflaged(const SdfRaster& r, int x, int y) const;
  SegNoiseParams p_;
  Rng rng_;
  std::array<float, kLattice * kLattice> lattice_{};
  double ox_ = 0, oy_ = 0;            // edge noise, redrawn every frame
  double camo_ox_ = 0, camo_oy_ = 0;  // camouflage field, fixed for the sequence view
};

}  // namespace gait
