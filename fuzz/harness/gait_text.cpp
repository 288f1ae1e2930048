// Fuzz targets for gait's text inputs: GaitGraph pose CSV, BVH, ASF + AMC captures
// (parsed, then turned into clips as the generator does) and the run config JSON.
#include "../fuzz_target.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/check.hpp"

#include "gait/motion/asf_amc.hpp"
#include "gait/motion/bvh.hpp"
#include "gait/pose.hpp"
#include "gait/train/config.hpp"

namespace {

using xs_fuzz::Bytes;

std::vector<Bytes> pose_seeds() {
  gait::PoseSequence seq;
  for (int f = 1; f <= 6; ++f) {
    gait::PoseFrame p{};
    for (int j = 0; j < gait::kCocoJoints; ++j) p[j] = {100.0f + j, 80.0f + f, j == 3 ? 0.0f : 0.8f};
    seq.frame_ids.push_back(f);
    seq.frames.push_back(p);
  }
  return {xs_fuzz::to_bytes(gait::pose_csv_text({12, gait::Condition::CL, 1, 36}, seq))};
}

void pose_run(const std::uint8_t* data, std::size_t size) {
  xs_fuzz::expect_clean([&] {
    gait::PoseCsvReader r;
    r.add_text(xs_fuzz::to_text(data, size), "fuzz.csv");
    r.finish();
  });
}

XS_FUZZ_TARGET("pose_csv", pose_seeds, pose_run);

void bvh_run(const std::uint8_t* data, std::size_t size) {
  xs_fuzz::expect_clean([&] { gait::bvh_to_clip(gait::parse_bvh(xs_fuzz::to_text(data, size), "fuzz.bvh"), "f", "p"); });
}

// Seeds: fuzz/corpus/bvh (a capture cut to a few frames).
XS_FUZZ_TARGET("bvh", [] { return std::vector<Bytes>{}; }, bvh_run);

// One input holds both files: the ASF skeleton, a line "::amc::", then the AMC motion.
constexpr std::string_view kAmcMarker = "\n::amc::\n";

void asf_amc_run(const std::uint8_t* data, std::size_t size) {
  const std::string text = xs_fuzz::to_text(data, size);
  const auto cut = text.find(kAmcMarker);
  xs_fuzz::expect_clean([&] {
    const gait::AsfSkeleton asf = gait::parse_asf(text.substr(0, cut), "fuzz.asf");
    if (cut == std::string::npos) return;
    gait::amc_to_clip(asf, gait::parse_amc(text.substr(cut + kAmcMarker.size()), "fuzz.amc"), 40, "f", "p");
  });
}

XS_FUZZ_TARGET("asf_amc", [] { return std::vector<Bytes>{}; }, asf_amc_run);

std::vector<Bytes> config_seeds() {
  return {xs_fuzz::to_bytes(gait::train::to_json(gait::train::Config{}).dump(1)),
          xs_fuzz::to_bytes(R"({"model": {"mode": "skeleton", "gcn": {"channels": [8, 8]}}, "trainer": {"iterations": 3}})")};
}

// As load_config reads a file: JSON errors are refusals too (it maps them to one line).
void config_run(const std::uint8_t* data, std::size_t size) {
  xs_fuzz::expect_clean([&] {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(xs_fuzz::to_text(data, size));
    } catch (const nlohmann::json::exception& e) {
      throw common::Error(fmt::format("fuzz.json: not valid JSON: {}", e.what()));
    }
    gait::train::parse_config(j, "fuzz.json");
  });
}

XS_FUZZ_TARGET("config_json", config_seeds, config_run);

}  // namespace
