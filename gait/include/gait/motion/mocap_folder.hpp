// A folder of walking captures laid out like ../shared/data/cmu-walk/:
//   DIR/<person>/<person>.asf + *.amc     (ASF/AMC; one skeleton per person folder)
//   DIR/<person>/*.bvh                    (BVH)
//   DIR/MANIFEST.tsv                      (optional: columns file, format, fps, description)
// AMC files carry no frame rate: the MANIFEST's fps, else CMU's 120 fps. A MANIFEST
// format "bvh-cgspeed-daz" marks the first BVH frame as the converter's T-pose; the
// description is the capture's own label ("walk", "slow walk"), kept on the clip.
// Unreadable files are reported in `problems` and skipped.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "gait/motion/clip.hpp"

namespace gait {

inline constexpr double kCmuCaptureFps = 120.0;

struct MocapManifestRow {
  std::string format, description;
  double fps = 0;
};
// file (relative to DIR, "<person>/<file>") -> row; a missing file gives no rows, a
// malformed row is reported in `problems` and skipped.
std::map<std::string, MocapManifestRow> read_mocap_manifest(const std::filesystem::path& path,
                                                            std::vector<std::string>& problems);

std::vector<MotionClip> load_mocap_folder(const std::filesystem::path& dir, std::vector<std::string>& problems);

// The embedded captures (gait/data/mocap in the source tree, or $GAIT_MOCAP_DIR).
std::filesystem::path default_mocap_dir();

}  // namespace gait
