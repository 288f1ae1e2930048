// The body as render primitives: tapered capsules for segments, boxes for bags, and a
// flat ground polygon for a shadow. Built from a posed canonical skeleton, the body
// shape and the walking condition:
//   NM  body + everyday clothes (top_bulk, trouser looseness via leg_girth);
//   BG  + the subject's bag: on a strap at the hip (shoulder bag), hanging from the hand
//       (the arm swings less and stays straight: see WalkStyle), or a backpack;
//   CL  + a padded coat: thicker torso, sleeves and thighs and a skirt across both legs
//       down to coat_length (mid-thigh to below the knee); the skeleton is unchanged.
//       The trunk's capsules are the coat's surface then (Part::Coat), so the keypoint
//       simulation knows which joints the coat hides.
#pragma once

#include <cstdint>
#include <vector>

#include "gait/casiab.hpp"
#include "gait/synth/body.hpp"
#include "gait/synth/canonical.hpp"

namespace gait {

enum class Part : std::uint8_t { Head, Torso, Arm, Leg, Foot, Bag, Coat, Shadow, None };

struct Capsule {
  Vec3 a, b;
  double ra = 0, rb = 0;  // m
  Part part = Part::Torso;
};

struct Box {  // a convex solid given by its corners (8 for a box, 4 for a flat polygon)
  std::vector<Vec3> corners;
  Part part = Part::Bag;
};

struct Scene {
  std::vector<Capsule> capsules;
  std::vector<Box> boxes;
};

// The head centre and its forward/up axes, shared with the COCO face keypoints.
struct HeadFrame {
  Vec3 centre, fwd, up, right;
};
HeadFrame head_frame(const CanonPose& p, const BodyShape& b);

Scene build_scene(const CanonPose& p, const BodyShape& b, Condition cond);

}  // namespace gait
