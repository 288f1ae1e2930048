// COCO-17 keypoints and GaitGraph's pose CSV.
//
//   image_name,nose_x,nose_y,nose_conf,left_eye_x,...,right_ankle_conf      (1 + 17 * 3 columns)
//   ./001-nm-01-090/000045.jpg,123.4,56.7,0.93,...
//
// image_name's second-to-last path part is the sequence id and its last part the video
// frame number; x, y are pixels of the 320x240 video frame, conf the estimator's score.
// Reading never throws on bad rows: a row with the wrong field count or a bad name is
// skipped; a joint that is NaN, unparsable, out of frame or marked missing (0, 0, 0)
// is repaired by linear interpolation (in frame number) from the nearest valid values
// of the same joint, with its confidence halved; a joint with no valid value anywhere in
// its sequence becomes (0, 0, 0). Everything is counted in PoseCsvStats.
#pragma once

#include <array>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "gait/casiab.hpp"

namespace gait {

inline constexpr int kCocoJoints = 17;
inline constexpr int kPoseCsvColumns = 1 + kCocoJoints * 3;

enum CocoJoint : int {
  kNose, kLeftEye, kRightEye, kLeftEar, kRightEar, kLeftShoulder, kRightShoulder, kLeftElbow, kRightElbow,
  kLeftWrist, kRightWrist, kLeftHip, kRightHip, kLeftKnee, kRightKnee, kLeftAnkle, kRightAnkle
};
extern const std::array<std::string_view, kCocoJoints> kCocoJointNames;  // "nose", "left_eye", ...
// The mirror joint of each joint (left <-> right; nose maps to itself).
extern const std::array<int, kCocoJoints> kCocoMirror;
// Limbs for drawing: pairs of joint indices.
extern const std::vector<std::pair<int, int>> kCocoBones;

struct Keypoint {
  float x = 0, y = 0, conf = 0;
};
using PoseFrame = std::array<Keypoint, kCocoJoints>;

struct PoseSequence {
  std::vector<int> frame_ids;  // ascending video frame numbers
  std::vector<PoseFrame> frames;
};
using PoseTable = std::map<SequenceKey, PoseSequence>;

struct PoseCsvOptions {
  // CASIA-B video frames are 320x240; coordinates outside [0, W] x [0, H] are out of frame.
  float frame_width = 320, frame_height = 240;
};

struct PoseCsvStats {
  std::size_t files = 0, rows = 0, rows_used = 0;
  std::size_t bad_field_count = 0, bad_name = 0, duplicate = 0, all_joints_invalid = 0;
  std::size_t joints_repaired = 0, joints_unrepairable = 0;
  std::vector<std::string> problems;  // capped per file; naming file:line
  std::size_t skipped_rows() const { return bad_field_count + bad_name + duplicate + all_joints_invalid; }
};

// Collects rows from any number of CSV files or texts, then repairs and returns them.
class PoseCsvReader {
 public:
  explicit PoseCsvReader(PoseCsvOptions opts = {}) : opts_(opts) {}
  void add_file(const std::filesystem::path& path);  // unreadable file: counted, not thrown
  void add_text(std::string_view text, const std::string& source_name);
  PoseTable finish();  // repairs and sorts; the reader is empty afterwards
  const PoseCsvStats& stats() const { return stats_; }

 private:
  struct RawJoint {
    float x, y, conf;
    bool valid;
  };
  using RawRow = std::array<RawJoint, kCocoJoints>;
  void note(const std::string& source, std::size_t line, const std::string& what);
  PoseCsvOptions opts_;
  PoseCsvStats stats_;
  std::map<SequenceKey, std::map<int, RawRow>> rows_;
  std::size_t notes_this_file_ = 0;
};

// A single file, or every *.csv below a folder (sorted), through one reader.
PoseTable read_pose_path(const std::filesystem::path& path, PoseCsvStats& stats, PoseCsvOptions opts = {});

std::string pose_image_name(const SequenceKey& key, int frame);  // "./001-nm-01-090/000045.jpg"
std::string pose_csv_header();
std::string pose_csv_text(const SequenceKey& key, const PoseSequence& seq);

}  // namespace gait
