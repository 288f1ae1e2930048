#include "gait/synth/scene.hpp"

#include <algorithm>

namespace gait {

namespace {
// Radii (m) of a 1.70 m adult at girth 1; scaled by stature and girth.
constexpr double kRefHeight = 1.70;
constexpr double kTorsoR = 0.115, kSideR = 0.075, kPelvisR = 0.10, kShoulderLineR = 0.06, kNeckR = 0.05;
constexpr double kThighR = 0.085, kKneeR = 0.055, kCalfR = 0.052, kAnkleR = 0.035, kFootR = 0.032;
constexpr double kUpperArmR = 0.045, kElbowR = 0.037, kWristR = 0.027, kHandR = 0.024;
}  // namespace

HeadFrame head_frame(const CanonPose& p, const BodyShape& b) {
  HeadFrame h;
  h.up = normalized(p[cHead] - p[cNeck]);
  // Facing: perpendicular to the shoulder line, on the horizontal plane.
  const Vec3 across = p[cRShoulder] - p[cLShoulder];
  h.fwd = normalized(cross({0, 1, 0}, across));
  h.fwd = normalized(h.fwd - h.up * dot(h.fwd, h.up));
  h.right = cross(h.fwd, h.up);
  h.centre = p[cHead] + h.up * (b.head_radius * 1.1) + h.fwd * (0.15 * b.head_radius);
  return h;
}

Scene build_scene(const CanonPose& p, const BodyShape& b, Condition cond) {
  Scene s;
  const double k = b.height / kRefHeight, g = b.girth * k, lg = b.leg_girth * k;
  const bool coat = cond == Condition::CL;
  const double torso_add = b.top_bulk + (coat ? b.coat_bulk : 0.0);
  const double arm_add = coat ? 0.6 * b.coat_bulk : 0.0;
  auto cap = [&](const Vec3& a, const Vec3& c, double ra, double rb, Part part) { s.capsules.push_back({a, c, ra, rb, part}); };
  // Head: a short vertical capsule (taller than wide) and the neck.
  const HeadFrame h = head_frame(p, b);
  cap(h.centre - h.up * (0.35 * b.head_radius), h.centre + h.up * (0.45 * b.head_radius), b.head_radius * 0.95,
      b.head_radius * 0.9, Part::Head);
  cap(p[cNeck], p[cHead], kNeckR * k, kNeckR * k * 0.9, Part::Head);
  // Torso: spine, both flanks, the pelvis and the shoulder line. Under a coat what the
  // camera sees there is the coat (the pose estimator and the camouflage read the part).
  const Part trunk = coat ? Part::Coat : Part::Torso;
  cap(p[cPelvis], p[cNeck] - (p[cNeck] - p[cPelvis]) * 0.08, kTorsoR * g + torso_add, kTorsoR * g * 0.95 + torso_add, trunk);
  cap(p[cLHip], p[cLShoulder], kSideR * g + torso_add * 0.7, kSideR * g * 0.9 + torso_add * 0.7, trunk);
  cap(p[cRHip], p[cRShoulder], kSideR * g + torso_add * 0.7, kSideR * g * 0.9 + torso_add * 0.7, trunk);
  cap(p[cLHip], p[cRHip], kPelvisR * g + torso_add * 0.5, kPelvisR * g + torso_add * 0.5, trunk);
  cap(p[cLShoulder], p[cRShoulder], kShoulderLineR * g + arm_add, kShoulderLineR * g + arm_add, trunk);
  // Legs and feet; a coat thickens the upper thigh.
  for (int side = 0; side < 2; ++side) {
    const int hip = side ? cRHip : cLHip, knee = side ? cRKnee : cLKnee, ankle = side ? cRAnkle : cLAnkle,
              toe = side ? cRToe : cLToe;
    const double thigh_add = coat ? 0.8 * b.coat_bulk : 0.0;
    cap(p[hip], p[knee], kThighR * lg + thigh_add, kKneeR * lg, Part::Leg);
    cap(p[knee], p[ankle], kCalfR * lg, kAnkleR * lg, Part::Leg);
    const Vec3 foot_dir = normalized(p[toe] - p[ankle]);
    const Vec3 heel = p[ankle] - foot_dir * b.heel + Vec3{0, -(b.ankle_height - kFootR * k), 0};
    cap(heel, p[toe], kFootR * k, kFootR * k * 0.85, Part::Foot);
  }
  // Arms and hands.
  for (int side = 0; side < 2; ++side) {
    const int sh = side ? cRShoulder : cLShoulder, el = side ? cRElbow : cLElbow, wr = side ? cRWrist : cLWrist;
    const double ga = std::sqrt(b.girth) * k;
    cap(p[sh], p[el], kUpperArmR * ga + arm_add, kElbowR * ga + arm_add, Part::Arm);
    cap(p[el], p[wr], kElbowR * ga * 0.95 + arm_add * 0.8, kWristR * ga + arm_add * 0.5, Part::Arm);
    const Vec3 hand_dir = normalized(p[wr] - p[el]);
    cap(p[wr], p[wr] + hand_dir * b.hand, kHandR * k, kHandR * k * 0.8, Part::Arm);
  }
  if (coat) {
    // The hem spans both legs at coat_length: along the thigh up to the knee; a longer
    // coat hangs on straight down from the knee. A wide capsule from the pelvis to the
    // hem's middle closes the gap between the legs, as the coat's skirt does.
    auto hem = [&](int hip, int knee) {
      if (b.coat_length <= 1.0) return lerp(p[hip], p[knee], b.coat_length);
      return p[knee] + Vec3{0, -1, 0} * ((b.coat_length - 1.0) * norm(p[knee] - p[hip]));
    };
    const Vec3 hl = hem(cLHip, cLKnee), hr = hem(cRHip, cRKnee);
    const double spread = 0.5 * norm(hl - hr);
    cap(p[cPelvis], (hl + hr) * 0.5, kPelvisR * g + b.coat_bulk, 0.75 * spread + kThighR * lg * 0.6 + b.coat_bulk * 0.5, Part::Coat);
    cap(p[cLHip], hl, kThighR * lg + b.coat_bulk, kThighR * lg + b.coat_bulk * 0.7, Part::Coat);
    cap(p[cRHip], hr, kThighR * lg + b.coat_bulk, kThighR * lg + b.coat_bulk * 0.7, Part::Coat);
  }
  if (cond == Condition::BG) {
    // Box axes: along the walk (fwd), vertical, across (lateral); fwd from the hips.
    const Vec3 up{0, 1, 0};
    const Vec3 across = normalized(p[cRHip] - p[cLHip]);
    const Vec3 fwd = normalized(cross(up, across));
    const double sd = b.bag_side;
    Vec3 centre;
    Vec3 ax = fwd * (b.bag_w / 2), ay = up * (b.bag_h / 2), az = across * (b.bag_d / 2);
    const int hand_wrist = b.bag_side > 0 ? cRWrist : cLWrist;
    switch (b.bag) {
      case BagStyle::Shoulder: {
        // Hangs at the hip on a strap from the opposite shoulder (cross-body).
        const Vec3 hip = p[b.bag_side > 0 ? cRHip : cLHip];
        centre = hip + across * (sd * (kPelvisR * g + b.bag_d / 2 + 0.02)) + up * 0.02;
        cap(p[b.bag_side > 0 ? cLShoulder : cRShoulder], centre + ay, 0.012, 0.012, Part::Bag);
        break;
      }
      case BagStyle::Hand:
        centre = p[hand_wrist] + up * (-(b.bag_h / 2 + b.hand * 0.6));
        break;
      case BagStyle::Backpack: {
        const Vec3 chest = lerp(p[cPelvis], p[cNeck], 0.62);
        ay = up * (std::max(b.bag_h, 0.3) / 2);
        ax = fwd * (b.bag_d / 2 + 0.02);
        az = across * (b.bag_w / 2);
        centre = chest - fwd * (kTorsoR * g + torso_add + b.bag_d / 2 + 0.01);
        break;
      }
    }
    Box box;
    box.part = Part::Bag;
    for (int i = 0; i < 8; ++i)
      box.corners.push_back(centre + ax * ((i & 1) ? 1 : -1) + ay * ((i & 2) ? 1 : -1) + az * ((i & 4) ? 1 : -1));
    s.boxes.push_back(std::move(box));
  }
  return s;
}

}  // namespace gait
