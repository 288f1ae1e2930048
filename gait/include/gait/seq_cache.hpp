// The preprocessed cache: one compact binary file per sequence, so training never
// decodes PNGs. Layout (little-endian; the build checks the host is little-endian):
//
//   offset size  field
//        0    8  magic "GAITSEQ\0"
//        8    4  version (kCacheVersion; readers refuse any other)
//       12    4  height (64)          16  4  width (44)
//       20    4  frames T             24  4  joints J (17, or 0 without pose)
//       28    4  subject  32 4 condition (0 nm, 1 bg, 2 cl)  36 4 sequence  40 4 view
//       44    4  CRC-32 (IEEE) of the payload
//       48       payload: frame_ids int32[T] | silhouettes uint8[T][64][44] | pose float32[T][J][3]
//
// Pose rows are aligned to the silhouette frames (row t belongs to frame t).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string_view>
#include <vector>

#include "gait/casiab.hpp"
#include "gait/pose.hpp"
#include "gait/silhouettes.hpp"

namespace gait {

inline constexpr std::uint32_t kCacheVersion = 1;
inline constexpr std::size_t kCacheHeaderBytes = 48;
inline constexpr std::string_view kCacheExtension = ".gseq";

struct CachedSequence {
  SequenceKey key;
  SilhouetteSequence sil;        // T frames
  std::vector<PoseFrame> pose;   // T rows, or empty when the dataset has no pose
};

struct CacheHeader {
  SequenceKey key;
  std::uint32_t frames = 0, joints = 0;
};

std::uint32_t crc32(const void* data, std::size_t n, std::uint32_t crc = 0);

std::vector<std::uint8_t> encode_cached_sequence(const CachedSequence& seq);
// Throws common::Error naming `source` on a bad magic, version, shape, size or checksum.
CachedSequence decode_cached_sequence(const std::uint8_t* data, std::size_t size, const std::string& source);

void write_cached_sequence(const std::filesystem::path& path, const CachedSequence& seq);  // atomic
CachedSequence read_cached_sequence(const std::filesystem::path& path);
CacheHeader read_cache_header(const std::filesystem::path& path);  // header only; no checksum check

// <cache>/<sid>/<sequence id>.gseq
std::filesystem::path cache_path(const std::filesystem::path& cache_dir, const SequenceKey& key);

}  // namespace gait
