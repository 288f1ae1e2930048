// Fuzz target for training checkpoints (.gckpt): header, checksum, metadata and its
// semantic checks (LibTorch builds only).
#include "../fuzz_target.hpp"

#include <cstring>

#include "gait/seq_cache.hpp"  // crc32
#include "gait/train/checkpoint.hpp"
#include "gait/train/config.hpp"

namespace {

using xs_fuzz::Bytes;

// A checkpoint around `meta` and `archive`: header, sizes and CRC made valid, so the
// mutations reach the metadata and its semantic checks instead of all failing the CRC.
std::string assemble(const std::string& meta, const std::string& archive) {
  std::string out(gait::train::kCheckpointHeaderBytes, '\0');
  std::memcpy(out.data(), "GAITCKPT", 8);
  const std::uint32_t version = gait::train::kCheckpointVersion, m = static_cast<std::uint32_t>(meta.size());
  const std::uint64_t p = archive.size();
  std::memcpy(out.data() + 8, &version, 4);
  std::memcpy(out.data() + 12, &m, 4);
  std::memcpy(out.data() + 16, &p, 8);
  out += meta;
  out += archive;
  const std::uint32_t crc = gait::crc32(out.data() + 32, out.size() - 32);
  std::memcpy(out.data() + 24, &crc, 4);
  return out;
}

std::string seed_meta() {
  return nlohmann::json{{"format", "gait-checkpoint"}, {"iteration", 2}, {"config", gait::train::to_json({})},
                        {"classes", {1, 2, 3}}, {"train_seconds", 1.5}, {"torch_version", "1.13"}}
      .dump(1);
}

// First byte even: the rest is a whole checkpoint file. Odd: the rest is metadata JSON,
// wrapped by assemble() with a small archive.
std::vector<Bytes> gckpt_seeds() {
  const std::string whole = assemble(seed_meta(), "archive");
  // The mode byte first: appended to a one-byte string (GCC 12 misreads `char + string`).
  std::string as_file(1, '\0'), as_meta(1, '\1');
  as_file += whole;
  as_meta += seed_meta();
  return {xs_fuzz::to_bytes(as_file), xs_fuzz::to_bytes(as_meta)};
}

void gckpt_run(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return;
  std::string rest = xs_fuzz::to_text(data + 1, size - 1);
  if (data[0] & 1) rest = assemble(rest, "archive");
  xs_fuzz::expect_clean([&] { gait::train::parse_checkpoint_meta(std::move(rest), "fuzz.gckpt"); });
}

XS_FUZZ_TARGET("gckpt", gckpt_seeds, gckpt_run);

}  // namespace
