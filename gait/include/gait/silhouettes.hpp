// Reading one CASIA-B view folder of silhouette PNGs into a preprocessed sequence (or
// into its decoded frames).
// Every problem (corrupt or truncated PNG, a frame whose size differs from the
// sequence's, a frame too small to be a video frame) skips that frame and is
// counted with a message naming the file; a missing folder or one with fewer than
// kMinSequenceFrames usable frames yields an empty sequence (the caller skips it).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "gait/preprocess.hpp"

namespace gait {

// OpenGait's pretreatment skips sequences with fewer than 5 usable frames.
inline constexpr std::size_t kMinSequenceFrames = 5;
// Smaller images cannot be video frames of a walking person (CASIA-B is 320x240).
inline constexpr int kMinFrameSide = 16;

struct SilhouetteSequence {
  std::vector<int> frame_ids;        // video frame numbers, ascending
  std::vector<std::uint8_t> pixels;  // [frames, 64, 44]
  std::size_t frames() const { return frame_ids.size(); }
  const std::uint8_t* frame(std::size_t t) const { return pixels.data() + t * kSilPixels; }
};

struct SilReadStats {
  std::size_t files = 0, used = 0, near_empty = 0, no_centre = 0, corrupt = 0, bad_size = 0;
  std::vector<std::string> problems;  // one line each, naming the file
  void merge(const SilReadStats& o);
};

// The PNG files of one view folder sorted by frame number (names without a frame
// number sort after, by name). Missing folder: empty list and a problem line.
std::vector<std::filesystem::path> list_frame_files(const std::filesystem::path& dir, SilReadStats& stats);

// One decoded frame of a view folder, before preprocessing.
struct RawFrame {
  int frame_id = 0;      // the file's frame number, or its 1-based position in the sorted list
  common::Image image;   // single-channel, the size of the folder's first usable frame
};
// Decodes every frame of `dir` in frame order; corrupt, too small and differently sized
// frames are skipped and counted.
std::vector<RawFrame> read_frame_images(const std::filesystem::path& dir, SilReadStats& stats);

// read_frame_images, then preprocesses each frame (near-empty and centreless ones dropped).
SilhouetteSequence read_silhouette_folder(const std::filesystem::path& dir, SilReadStats& stats);

}  // namespace gait
