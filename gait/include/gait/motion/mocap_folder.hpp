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

// What pack_mocap_folder wrote: clips (AMC and BVH) and bytes of motion files.
struct MocapPackSummary {
  std::size_t clips = 0, bytes = 0;
};
// The compact copy of a capture folder (the layout above) in `out`, as the repository
// embeds it (gait/data/mocap): every clip keeps every `step`-th frame from the first,
// rotations rounded to 0.1 degree and positions to 0.01 unit, and only what the
// retargeting reads (BVH: trim_bvh; AMC: the spine, head, arms down to the radius and
// legs down to the foot); ASF skeletons are copied. MANIFEST.tsv lists each clip with
// its packed and source frames and rates and the source MANIFEST's description (whose
// malformed rows go to `problems`). The files are staged beside `out` and moved into
// place only when every clip was read, so a bad file leaves `out` as it was. Throws one
// line for a missing capture folder, an output path that cannot be a folder, folders
// that overlap, step < 1 or a malformed clip (naming file and line).
MocapPackSummary pack_mocap_folder(const std::filesystem::path& from, const std::filesystem::path& out, int step,
                                   std::vector<std::string>& problems);

// The embedded captures (gait/data/mocap in the source tree, or $GAIT_MOCAP_DIR).
std::filesystem::path default_mocap_dir();

}  // namespace gait
