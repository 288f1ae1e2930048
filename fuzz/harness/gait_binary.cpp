// Fuzz targets for gait's binary inputs: PNG silhouettes (decoded, then preprocessed as
// every frame is), .gseq cache files and .npy embedding dumps.
#include "../fuzz_target.hpp"

#include "common/png.hpp"
#include "common/png_fast.hpp"
#include "gait/eval/embeddings.hpp"
#include "gait/preprocess.hpp"
#include "gait/seq_cache.hpp"
#include "gait/silhouettes.hpp"

namespace {

using xs_fuzz::Bytes;

// A walker-like blob: 320 x 240 grey, as CASIA-B frames are.
common::Image silhouette() {
  auto img = common::Image::blank(320, 240, 1);
  for (int y = 60; y < 190; ++y)
    for (int x = 150 + (y % 7); x < 175 + (y % 5); ++x) img.at(y, x) = 255;
  return img;
}

std::vector<Bytes> png_seeds() {
  return {common::encode_png_fast(silhouette()), common::encode_png(common::Image::blank(8, 6, 3, 200))};
}

void png_run(const std::uint8_t* data, std::size_t size) {
  xs_fuzz::expect_clean([&] {
    const common::Image img = common::decode_png(data, size, 1, "fuzz.png");
    gait::preprocess_silhouette(img);  // whatever decodes must also preprocess
  });
}

XS_FUZZ_TARGET("png", png_seeds, png_run);

std::vector<Bytes> gseq_seeds() {
  gait::CachedSequence s;
  s.key = {1, gait::Condition::NM, 1, 90};
  for (int t = 0; t < static_cast<int>(gait::kMinSequenceFrames); ++t) {
    s.sil.frame_ids.push_back(t + 1);
    s.sil.pixels.insert(s.sil.pixels.end(), gait::kSilPixels, static_cast<std::uint8_t>(40 * t));
    gait::PoseFrame f{};
    for (int j = 0; j < gait::kCocoJoints; ++j) f[j] = {100.0f + j, 50.0f + t, 0.9f};
    s.pose.push_back(f);
  }
  gait::CachedSequence no_pose = s;
  no_pose.pose.clear();
  return {gait::encode_cached_sequence(s), gait::encode_cached_sequence(no_pose)};
}

void gseq_run(const std::uint8_t* data, std::size_t size) {
  xs_fuzz::expect_clean([&] { gait::decode_cached_sequence(data, size, "fuzz.gseq"); });
}

XS_FUZZ_TARGET("gseq", gseq_seeds, gseq_run);

std::vector<Bytes> npy_seeds() {
  const std::size_t shape[3] = {2, 3, 2};
  const std::vector<float> v = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  return {xs_fuzz::to_bytes(gait::eval::encode_npy_f32(shape, v))};
}

void npy_run(const std::uint8_t* data, std::size_t size) {
  xs_fuzz::expect_clean([&] {
    std::vector<std::size_t> shape;
    gait::eval::decode_npy_f32(xs_fuzz::to_text(data, size), shape, "fuzz.npy");
  });
}

XS_FUZZ_TARGET("npy", npy_seeds, npy_run);

}  // namespace
