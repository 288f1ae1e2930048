#include "gait/synth/walker.hpp"

#include <algorithm>
#include <cmath>

namespace gait {

namespace {
constexpr double kPi = 3.14159265358979323846;
constexpr double kToeRadius = 0.02;  // m: sole thickness under the ball of the foot
}  // namespace

Walker::Walker(const BodyShape& body, const WalkStyle& style) : body_(body), style_(style) {
  duration_ = style.code.duration_s() / style.speed_factor;
  for (int b = 0; b < kCanonBones; ++b) {
    Vec3 m;
    for (int k = 0; k < 32; ++k) m += evaluate_code(style.code, k / 32.0).dirs[b];
    mean_dir_[b] = normalized(m);
  }
  // Stance-foot progression over one cycle: the lower foot stays put.
  std::vector<double> cum(kProgressionSamples + 1, 0.0);
  // The stance foot is the one moving backward relative to the pelvis (the lower one
  // when both do, in double support). Its contact point is its lower end, the heel
  // (under the ankle) or the ball; each step is measured on the point that carried the
  // weight at its start, so rolling from heel to ball does not count as a jump.
  struct Contact {
    double y;
    int joint;
  };
  auto contact = [&](const CanonPose& p, int side) {
    const int a = side ? cRAnkle : cLAnkle, t = side ? cRToe : cLToe;
    const double ya = p[a].y - body_.ankle_height, yt = p[t].y - kToeRadius;
    return ya < yt ? Contact{ya, a} : Contact{yt, t};
  };
  CanonPose prev = relative_pose(0);
  for (int k = 1; k <= kProgressionSamples; ++k) {
    const CanonPose cur = relative_pose(static_cast<double>(k) / kProgressionSamples);
    const Contact l = contact(prev, 0), r = contact(prev, 1);
    // A foot moving forward relative to the pelvis is swinging, whatever its height.
    const bool l_back = cur[cLAnkle].x <= prev[cLAnkle].x, r_back = cur[cRAnkle].x <= prev[cRAnkle].x;
    const int j = (l_back != r_back) ? (l_back ? l.joint : r.joint) : (l.y <= r.y ? l.joint : r.joint);
    cum[k] = cum[k - 1] - (cur[j].x - prev[j].x);
    prev = cur;
  }
  stride_ = std::max(cum[kProgressionSamples], 0.1);
  speed_ = stride_ / duration_;
  offset_.resize(kProgressionSamples + 1);
  for (int k = 0; k <= kProgressionSamples; ++k) offset_[k] = cum[k] - stride_ * k / kProgressionSamples;
}

double Walker::offset_at(double phase) const {
  phase -= std::floor(phase);
  const double f = phase * kProgressionSamples;
  const int i = std::min(static_cast<int>(f), kProgressionSamples - 1);
  return offset_[i] + (offset_[i + 1] - offset_[i]) * (f - i);
}

CanonPose Walker::relative_pose(double phase) const {
  PhasePose pp = evaluate_code(style_.code, phase);
  auto& d = pp.dirs;
  // Arm swing about the mean direction; a straight arm carries a bag.
  const int upper[2] = {bLUpperArm, bRUpperArm}, fore[2] = {bLForearm, bRForearm};
  for (int s = 0; s < 2; ++s) {
    const double k = style_.arm_swing[s] * body_.arm_swing;
    d[upper[s]] = normalized(mean_dir_[upper[s]] + (d[upper[s]] - mean_dir_[upper[s]]) * k);
    d[fore[s]] = style_.straight_arm[s] ? d[upper[s]]
                                        : normalized(mean_dir_[fore[s]] + (d[fore[s]] - mean_dir_[fore[s]]) * k);
  }
  // Posture: trunk lean and head pitch rotate about the lateral (z) axis, forward = +x;
  // a sideways lean about the walking (x) axis, positive towards +z.
  const Mat3 lean = axis_rotation(0, style_.side_lean_deg) * axis_rotation(2, -(body_.lean_deg + style_.extra_lean_deg));
  const Mat3 pitch = axis_rotation(2, -body_.head_pitch_deg);
  for (int b : {bSpine, bNeck, bLClav, bRClav}) d[b] = lean * d[b];
  d[bNeck] = pitch * d[bNeck];
  CanonPose p;
  p[cPelvis] = {};
  auto place = [&](int bone, double len) {
    const auto& cb = kCanonBoneList[bone];
    p[cb.child] = p[cb.parent] + d[bone] * len;
  };
  place(bLHip, body_.hip_half);
  place(bRHip, body_.hip_half);
  place(bLThigh, body_.thigh);
  place(bRThigh, body_.thigh);
  place(bLShin, body_.shin);
  place(bRShin, body_.shin);
  place(bLFoot, body_.foot);
  place(bRFoot, body_.foot);
  place(bSpine, body_.spine);
  place(bNeck, body_.neck);
  place(bLClav, body_.shoulder_half);
  place(bRClav, body_.shoulder_half);
  place(bLUpperArm, body_.upper_arm);
  place(bRUpperArm, body_.upper_arm);
  place(bLForearm, body_.forearm);
  place(bRForearm, body_.forearm);
  const double sway = pp.sway * body_.leg_length();
  for (auto& j : p) j.z += sway;
  return p;
}

double Walker::ground_lift(const CanonPose& rel) const {
  double low = 1e9;
  for (int a : {cLAnkle, cRAnkle}) low = std::min(low, rel[a].y - body_.ankle_height);
  for (int t : {cLToe, cRToe}) low = std::min(low, rel[t].y - kToeRadius);
  return -low;
}

CanonPose Walker::pose(double t) const {
  const double phase = style_.start_phase + t / duration_;
  CanonPose p = relative_pose(phase);
  const double x = speed_ * t + offset_at(phase) - offset_at(style_.start_phase);
  const double y = ground_lift(p);
  for (auto& j : p) {
    j.x += x;
    j.y += y;
  }
  return p;
}

}  // namespace gait
