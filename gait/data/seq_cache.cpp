#include "gait/seq_cache.hpp"

#include <array>
#include <bit>
#include <cstring>
#include <fstream>

#include "common/check.hpp"
#include "common/files.hpp"
#include "gait/silhouettes.hpp"  // kMinSequenceFrames

namespace gait {

static_assert(std::endian::native == std::endian::little, "the cache format is little-endian");

namespace {

constexpr char kMagic[8] = {'G', 'A', 'I', 'T', 'S', 'E', 'Q', '\0'};

std::array<std::uint32_t, 256> make_crc_table() {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[i] = c;
  }
  return t;
}

void put32(std::vector<std::uint8_t>& out, std::size_t at, std::uint32_t v) { std::memcpy(out.data() + at, &v, 4); }
std::uint32_t get32(const std::uint8_t* p, std::size_t at) {
  std::uint32_t v;
  std::memcpy(&v, p + at, 4);
  return v;
}

}  // namespace

std::uint32_t crc32(const void* data, std::size_t n, std::uint32_t crc) {
  static const auto table = make_crc_table();
  const auto* p = static_cast<const std::uint8_t*>(data);
  crc = ~crc;
  for (std::size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

std::vector<std::uint8_t> encode_cached_sequence(const CachedSequence& s) {
  const std::size_t t = s.sil.frames();
  XS_ASSERT(s.sil.pixels.size() == t * kSilPixels, "{}: silhouette buffer does not hold {} frames", sequence_id(s.key), t);
  XS_ASSERT(s.pose.empty() || s.pose.size() == t, "{}: {} pose rows for {} frames", sequence_id(s.key), s.pose.size(), t);
  const std::uint32_t joints = s.pose.empty() ? 0 : kCocoJoints;
  const std::size_t payload = t * 4 + t * kSilPixels + t * joints * 3 * 4;
  std::vector<std::uint8_t> out(kCacheHeaderBytes + payload);
  std::memcpy(out.data(), kMagic, 8);
  put32(out, 8, kCacheVersion);
  put32(out, 12, kSilHeight);
  put32(out, 16, kSilWidth);
  put32(out, 20, static_cast<std::uint32_t>(t));
  put32(out, 24, joints);
  put32(out, 28, static_cast<std::uint32_t>(s.key.subject));
  put32(out, 32, static_cast<std::uint32_t>(s.key.cond));
  put32(out, 36, static_cast<std::uint32_t>(s.key.seq));
  put32(out, 40, static_cast<std::uint32_t>(s.key.view));
  std::size_t at = kCacheHeaderBytes;
  std::memcpy(out.data() + at, s.sil.frame_ids.data(), t * 4);
  at += t * 4;
  std::memcpy(out.data() + at, s.sil.pixels.data(), t * kSilPixels);
  at += t * kSilPixels;
  for (const PoseFrame& f : s.pose)
    for (const Keypoint& k : f) {
      const float v[3] = {k.x, k.y, k.conf};
      std::memcpy(out.data() + at, v, 12);
      at += 12;
    }
  put32(out, 44, crc32(out.data() + kCacheHeaderBytes, payload));
  return out;
}

namespace {
CacheHeader decode_header(const std::uint8_t* p, std::size_t size, const std::string& source) {
  if (size < kCacheHeaderBytes || std::memcmp(p, kMagic, 8) != 0)
    throw common::Error(source + ": not a gait sequence cache file");
  const std::uint32_t version = get32(p, 8);
  if (version != kCacheVersion)
    throw common::Error(fmt::format("{}: cache version {}, this build reads {} (rebuild with gait preprocess --force)",
                                    source, version, kCacheVersion));
  if (get32(p, 12) != kSilHeight || get32(p, 16) != kSilWidth)
    throw common::Error(fmt::format("{}: frames are {}x{}, expected {}x{}", source, get32(p, 12), get32(p, 16),
                                    kSilHeight, kSilWidth));
  CacheHeader h;
  h.frames = get32(p, 20);
  h.joints = get32(p, 24);
  const std::uint32_t cond = get32(p, 32);
  if ((h.joints != 0 && h.joints != kCocoJoints) || cond > 2 || h.frames > (1u << 20))
    throw common::Error(source + ": corrupt cache header");
  // What the writer can produce (cache_build.cpp skips shorter sequences; keys follow
  // casiab.hpp): anything else is a damaged or foreign file, refused before it is used.
  if (h.frames < kMinSequenceFrames)
    throw common::Error(fmt::format("{}: {} frames, fewer than the {} of any cached sequence (corrupt header)", source,
                                    h.frames, kMinSequenceFrames));
  const std::uint32_t subject = get32(p, 28), seq = get32(p, 36), view = get32(p, 40);
  if (subject < 1 || subject > 999 || seq < 1 || seq > 99 || view >= 360)
    throw common::Error(fmt::format("{}: sequence key {}/{}/{} is not a CASIA-B subject, sequence and view (corrupt "
                                    "header)",
                                    source, subject, seq, view));
  h.key = {static_cast<int>(subject), static_cast<Condition>(cond), static_cast<int>(seq), static_cast<int>(view)};
  return h;
}
}  // namespace

CachedSequence decode_cached_sequence(const std::uint8_t* p, std::size_t size, const std::string& source) {
  const CacheHeader h = decode_header(p, size, source);
  const std::size_t t = h.frames;
  const std::size_t payload = t * 4 + t * kSilPixels + t * h.joints * 3 * 4;
  if (size != kCacheHeaderBytes + payload)
    throw common::Error(fmt::format("{}: {} bytes, the header promises {} (truncated?)", source, size,
                                    kCacheHeaderBytes + payload));
  if (crc32(p + kCacheHeaderBytes, payload) != get32(p, 44)) throw common::Error(source + ": checksum mismatch");
  CachedSequence s;
  s.key = h.key;
  std::size_t at = kCacheHeaderBytes;
  s.sil.frame_ids.resize(t);
  std::memcpy(s.sil.frame_ids.data(), p + at, t * 4);
  at += t * 4;
  s.sil.pixels.assign(p + at, p + at + t * kSilPixels);
  at += t * kSilPixels;
  if (h.joints) {
    s.pose.resize(t);
    for (PoseFrame& f : s.pose)
      for (Keypoint& k : f) {
        float v[3];
        std::memcpy(v, p + at, 12);
        at += 12;
        k = {v[0], v[1], v[2]};
      }
  }
  return s;
}

void write_cached_sequence(const std::filesystem::path& path, const CachedSequence& seq) {
  const auto bytes = encode_cached_sequence(seq);
  common::write_file_atomic(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

CachedSequence read_cached_sequence(const std::filesystem::path& path) {
  const std::string bytes = common::read_file(path);
  return decode_cached_sequence(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size(), path.string());
}

CacheHeader read_cache_header(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw common::Error(path.string() + ": cannot open for reading");
  std::uint8_t buf[kCacheHeaderBytes];
  in.read(reinterpret_cast<char*>(buf), kCacheHeaderBytes);
  return decode_header(buf, static_cast<std::size_t>(in.gcount()), path.string());
}

std::filesystem::path cache_path(const std::filesystem::path& cache_dir, const SequenceKey& key) {
  return cache_dir / subject_name(key.subject) / (sequence_id(key) + std::string(kCacheExtension));
}

}  // namespace gait
