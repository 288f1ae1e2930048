// Per-subject body shape, posture and clothing, sampled from anthropometric
// proportions (segment lengths as fractions of stature H, after Drillis & Contini as
// tabulated by Winter, "Biomechanics and Motor Control of Human Movement"):
//   hip joint 0.530 H, knee 0.285 H, ankle 0.039 H, shoulder 0.818 H;
//   upper arm 0.186 H, forearm 0.146 H; biacromial breadth 0.259 H; foot 0.152 H.
// Radii are for a 1.70 m adult and scale with H and a per-subject girth.
#pragma once

#include "gait/rng.hpp"

namespace gait {

enum class BagStyle { Shoulder, Hand, Backpack };

struct BodyShape {
  double height = 1.70;  // stature, m
  // Segment lengths, m.
  double hip_half = 0, thigh = 0, shin = 0, ankle_height = 0, foot = 0, heel = 0;
  double spine = 0, neck = 0, shoulder_half = 0, upper_arm = 0, forearm = 0, hand = 0, head_radius = 0;
  // Shape: radius multipliers (torso, legs), NM clothing bulk, posture.
  double girth = 1, leg_girth = 1, top_bulk = 0;  // top_bulk: m added to the torso
  double lean_deg = 0, head_pitch_deg = 0, arm_swing = 1;
  // BG: the subject's bag (same in bg-01 and bg-02).
  BagStyle bag = BagStyle::Shoulder;
  int bag_side = 1;            // +1 right, -1 left
  double bag_w = 0.3, bag_h = 0.25, bag_d = 0.1;  // m: along the walk, vertical, across
  // The carrier's trunk lean while the bag is carried (carry_bag): forward, on top of
  // lean_deg, under a backpack; sideways, away from bag_side, for a one-sided bag.
  double bag_lean_deg = 0;
  // CL: the subject's coat.
  double coat_bulk = 0.06;     // m added to torso and thigh radii (0.6x to the sleeves)
  double coat_length = 1.0;    // hem: 0 = hip, 1 = knee, beyond 1 that many thigh lengths below the knee
  double leg_length() const { return thigh + shin + ankle_height; }
};

BodyShape sample_body(Rng& rng);

}  // namespace gait
