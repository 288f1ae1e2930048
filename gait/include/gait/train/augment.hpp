// Training-time augmentation of a batch (gait/sampler.hpp's Batch), in place. Every
// random choice is drawn from the caller's Rng in a fixed order, so a batch is a pure
// function of (sampler state, step seed): resuming a run redraws the same batch.
//
// Silhouettes, per clip (one draw shared by all frames, so the motion stays intact):
//   - a small similarity transform about the image centre: rotation uniform in
//     +-sil_rotate_deg, shift uniform in +-sil_shift_px (x and y); bilinear sampling,
//     zero outside the image;
//   - random erasing with probability sil_erase_p: one rectangle of 2-15 % of the
//     64x44 frame, aspect 0.3-3.3, set to 0 in every frame.
// Skeletons, per clip:
//   - Gaussian noise of sd pose_noise_px on x and y of every joint and frame
//     (joints with confidence 0 are missing and stay (0, 0, 0));
//   - mirror with probability pose_mirror_p: x -> 2 cx - x about the clip's mean hip
//     centre, and COCO left/right joints swapped (kCocoMirror), so the mirrored clip is
//     a plausible person walking the other way;
//   - time flip with probability pose_time_flip_p: the frame order is reversed.
// Shapes: sil [n, t, 64, 44] floats in [0, 1]; pose [n, t, 17, 3] (x, y, conf).
#pragma once

#include "gait/rng.hpp"
#include "gait/sampler.hpp"
#include "gait/train/config.hpp"

namespace gait::train {

// threads: silhouette warps run on up to this many threads (the result does not depend on it).
void augment_batch(Batch& b, const AugmentConfig& cfg, Rng& rng, int threads = 1);

// Building blocks (tests).
void transform_silhouettes(float* clip, int frames, double angle_deg, double dx, double dy);  // [t, 64, 44]
void erase_rectangle(float* clip, int frames, int y0, int x0, int h, int w);
void mirror_pose(float* clip, int frames);      // [t, 17, 3]
void time_flip_pose(float* clip, int frames);

}  // namespace gait::train
