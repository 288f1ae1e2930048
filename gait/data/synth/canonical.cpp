#include "gait/synth/canonical.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "common/check.hpp"

namespace gait {

namespace {

using Aliases = std::array<std::vector<const char*>, kCanonJoints>;

// ASF joints are bone *ends*: the hip joint is where "lhipjoint" ends, the knee where
// "lfemur" ends, and so on.
const Aliases kAsf = {{
    {},  // pelvis: the midpoint of the hips
    {"lhipjoint"}, {"rhipjoint"}, {"lfemur"}, {"rfemur"}, {"ltibia"}, {"rtibia"}, {"lfoot"}, {"rfoot"},
    {"thorax"}, {"upperneck"}, {"lclavicle"}, {"rclavicle"}, {"lhumerus"}, {"rhumerus"}, {"lradius"}, {"rradius"}}};

// BVH joints are joint *origins*; cgspeed/DAZ names first, then Mixamo-style and others.
const Aliases kBvh = {{
    {},
    {"lThigh", "LeftUpLeg", "LeftHip", "LHipJoint"},
    {"rThigh", "RightUpLeg", "RightHip", "RHipJoint"},
    {"lShin", "LeftLeg", "LeftKnee"},
    {"rShin", "RightLeg", "RightKnee"},
    {"lFoot", "LeftFoot", "LeftAnkle"},
    {"rFoot", "RightFoot", "RightAnkle"},
    {"lFoot_end", "LeftToeBase", "LeftToe", "LeftFoot_end"},
    {"rFoot_end", "RightToeBase", "RightToe", "RightFoot_end"},
    {"neck", "Neck", "Neck1"},
    {"head", "Head"},
    {"lShldr", "LeftArm", "LeftShoulder"},
    {"rShldr", "RightArm", "RightShoulder"},
    {"lForeArm", "LeftForeArm", "LeftElbow"},
    {"rForeArm", "RightForeArm", "RightElbow"},
    {"lHand", "LeftHand", "LeftWrist"},
    {"rHand", "RightHand", "RightWrist"}}};

const char* kCanonNames[kCanonJoints] = {"pelvis", "left hip", "right hip", "left knee", "right knee",
                                         "left ankle", "right ankle", "left toe", "right toe", "neck", "head",
                                         "left shoulder", "right shoulder", "left elbow", "right elbow",
                                         "left wrist", "right wrist"};

}  // namespace

CanonMotion retarget_to_canonical(const MotionClip& clip) {
  const Aliases& table = clip.format == "asf-amc" ? kAsf : kBvh;
  std::array<int, kCanonJoints> src{};
  for (int c = 1; c < kCanonJoints; ++c) {
    src[c] = -1;
    for (const char* name : table[c])
      if ((src[c] = clip.joint(name)) >= 0) break;
    if (src[c] < 0)
      throw common::Error(fmt::format("{} ({}): no joint for the {} (tried: {})", clip.name, clip.format,
                                      kCanonNames[c], fmt::join(table[c], ", ")));
  }
  CanonMotion m;
  m.clip = clip.name;
  m.person = clip.person;
  m.fps = clip.fps;
  m.first_frame = clip.first_motion_frame();
  std::vector<double> legs;
  for (const auto& f : clip.frames) {
    CanonPose p;
    for (int c = 1; c < kCanonJoints; ++c) p[c] = f[src[c]];
    p[cPelvis] = (p[cLHip] + p[cRHip]) * 0.5;
    legs.push_back(0.5 * (norm(p[cLKnee] - p[cLHip]) + norm(p[cLAnkle] - p[cLKnee]) + norm(p[cRKnee] - p[cRHip]) +
                          norm(p[cRAnkle] - p[cRKnee])));
    m.frames.push_back(p);
  }
  XS_ASSERT(!legs.empty(), "{}: no frames", clip.name);
  std::nth_element(legs.begin(), legs.begin() + legs.size() / 2, legs.end());
  m.leg_length = legs[legs.size() / 2];
  XS_ASSERT(m.leg_length > 0, "{}: zero leg length", clip.name);
  return m;
}

}  // namespace gait
