// A folder of walking captures laid out like ../shared/data/cmu-walk/:
//   DIR/<person>/<person>.asf + *.amc     (ASF/AMC; one skeleton per person folder)
//   DIR/<person>/*.bvh                    (BVH)
//   DIR/MANIFEST.tsv                      (optional: columns file, format, fps)
// AMC files carry no frame rate: the MANIFEST's fps, else CMU's 120 fps. A MANIFEST
// format "bvh-cgspeed-daz" marks the first BVH frame as the converter's T-pose.
// Unreadable files are reported in `problems` and skipped.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "gait/motion/clip.hpp"

namespace gait {

inline constexpr double kCmuCaptureFps = 120.0;

std::vector<MotionClip> load_mocap_folder(const std::filesystem::path& dir, std::vector<std::string>& problems);

// The embedded captures (gait/data/mocap in the source tree, or $GAIT_MOCAP_DIR).
std::filesystem::path default_mocap_dir();

}  // namespace gait
