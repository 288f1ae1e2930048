#include "gait/synth/body.hpp"

#include <algorithm>

namespace gait {

BodyShape sample_body(Rng& rng) {
  BodyShape b;
  // Adult stature: mean 1.70 m, sd 0.08 m (a mixed-sex population), within +-2.5 sd.
  const double h = b.height = rng.clipped_normal(1.70, 0.08, 2.5);
  // Individual proportions vary by a few percent around the tabulated fractions.
  auto prop = [&](double frac, double sd) { return h * frac * rng.clipped_normal(1.0, sd, 2.5); };
  b.ankle_height = prop(0.039, 0.05);
  b.shin = prop(0.285 - 0.039, 0.03);
  b.thigh = prop(0.530 - 0.285, 0.03);
  b.hip_half = prop(0.052, 0.06);
  b.spine = prop(0.818 - 0.530, 0.03);
  b.neck = prop(0.052, 0.08);
  b.shoulder_half = prop(0.115, 0.05);
  b.upper_arm = prop(0.186, 0.03);
  b.forearm = prop(0.146, 0.03);
  b.hand = prop(0.075, 0.05);
  b.foot = prop(0.105, 0.04);
  b.heel = prop(0.035, 0.08);
  b.head_radius = prop(0.050, 0.05);
  b.girth = rng.clipped_normal(1.0, 0.12, 2.5);
  b.leg_girth = std::clamp(0.6 * b.girth + 0.4 * rng.clipped_normal(1.0, 0.08, 2.5), 0.75, 1.4);
  b.top_bulk = rng.uniform(0.0, 0.02);
  b.lean_deg = rng.clipped_normal(1.5, 2.0, 2.5);
  b.head_pitch_deg = rng.clipped_normal(0.0, 4.0, 2.5);
  b.arm_swing = rng.clipped_normal(1.0, 0.15, 2.0);
  const double u = rng.uniform();
  b.bag = u < 0.45 ? BagStyle::Shoulder : u < 0.7 ? BagStyle::Hand : BagStyle::Backpack;
  b.bag_side = rng.chance(0.5) ? 1 : -1;
  b.bag_w = rng.uniform(0.25, 0.40);
  b.bag_h = rng.uniform(0.20, 0.38);
  b.bag_d = rng.uniform(0.08, 0.16);
  // CASIA-B's CL sequences are winter coats and jackets: padded, many down to or past
  // the knee (silhouette methods lose 14-27 points on CL against NM there).
  b.coat_bulk = rng.uniform(0.04, 0.09);
  b.coat_length = rng.uniform(0.6, 1.5);
  // Load-carriage posture (drawn last, so the draws above keep their values): the trunk
  // shifts the body's centre of mass back over the feet, forward under a backpack and
  // away from a bag carried on one side, more for a bag in the hand than for one at
  // the hip on a cross-body strap (docs/gait-data.md, Calibration).
  const double lean_lo = b.bag == BagStyle::Backpack ? 2.0 : b.bag == BagStyle::Hand ? 3.0 : 1.0;
  const double lean_hi = b.bag == BagStyle::Backpack ? 6.0 : b.bag == BagStyle::Hand ? 7.0 : 4.0;
  b.bag_lean_deg = rng.uniform(lean_lo, lean_hi);
  return b;
}

}  // namespace gait
