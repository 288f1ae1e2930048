// The synthetic CASIA-B-like generator: who walks (subject plans), how each sequence
// is walked (walker + condition), and what the 11 cameras see (silhouettes with
// segmentation noise, COCO-17 keypoints from a simulated estimator).
//
// One (subject, condition, sequence) is one walk along the path, filmed by every
// camera at once, as in CASIA-B. Each view keeps the frames in which the whole body
// is inside the image vertically and at least half of it horizontally (the person
// entering or leaving); the pose estimator reports a row only when the whole body is
// inside and it did not miss the person (kDetectorMiss), so silhouette and pose
// frame counts differ, and frames are numbered by video frame (a lead-in of a few
// frames before the first one).
//
// Everything is a pure function of (seed, subject, condition, sequence, view), so the
// output does not depend on the number of threads.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "common/png.hpp"
#include "gait/casiab.hpp"
#include "gait/pose.hpp"
#include "gait/synth/body.hpp"
#include "gait/synth/camera.hpp"
#include "gait/synth/gait_model.hpp"
#include "gait/synth/keypoints.hpp"
#include "gait/synth/seg_noise.hpp"
#include "gait/synth/walker.hpp"

namespace gait {

enum class MotionSource { Cmu, Procedural, Mixed };
std::string_view motion_source_name(MotionSource m);

inline constexpr double kVideoFps = 25.0;       // CASIA-B videos
inline constexpr double kDetectorMiss = 0.02;   // frames in which the estimator finds nobody
inline constexpr double kSpeedSpread = 0.03;    // sd of log cadence between sequences
inline constexpr double kVisibleConf = 0.5;     // "visible" for the joint-in-silhouette check

struct GeneratorOptions {
  int subjects = kCasiaSubjects;
  std::uint64_t seed = 1;
  MotionSource motion = MotionSource::Mixed;
  std::vector<int> views = standard_views();
  std::vector<std::pair<Condition, int>> sequences = standard_sequences();
  double path_half_length = 2.4;  // m: the walk runs from x = -2.4 to x = +2.4 (~110 frames)
  CameraRig rig;
  EstimatorParams estimator;      // the simulated pose estimator
  double camo_prob = kCamoProb;   // sequence views in which one garment matches the background
};

struct SubjectPlan {
  int subject = 0;
  BodyShape body;
  std::string motion;  // the captured person ("07") or "procedural"
  CycleCode identity;  // procedural walkers only
};

struct ViewRender {
  SequenceKey key;
  std::vector<int> sil_frames;             // video frame numbers of `sil`
  std::vector<common::Image> sil;          // 320x240 0/255
  PoseSequence pose;                       // rows only where the estimator saw the person
  std::size_t joints_checked = 0, joints_inside = 0;  // visible joints falling on the silhouette
};

// How carrying the subject's bag changes a walk (BG): the carrying arm's swing, a
// straight arm for a bag in the hand, and the trunk's lean against the load.
void carry_bag(const BodyShape& body, WalkStyle& style);

class Generator {
 public:
  Generator(const GeneratorOptions& opts, const GaitModel& model);
  const SubjectPlan& plan(int subject) const { return plans_.at(static_cast<std::size_t>(subject - 1)); }
  const std::vector<SubjectPlan>& plans() const { return plans_; }
  // Renders every view of one sequence; `sink` receives them one at a time. Thread-safe.
  void render(int subject, Condition cond, int seq, const std::function<void(ViewRender&&)>& sink) const;
  const GeneratorOptions& options() const { return opts_; }

 private:
  GeneratorOptions opts_;
  const GaitModel& model_;
  std::vector<SubjectPlan> plans_;
};

}  // namespace gait
