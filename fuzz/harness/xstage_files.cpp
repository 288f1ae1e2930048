// Fuzz targets for xstage's inputs: the probe sweep CSV, Burst-Gap params JSON and
// safetensors weights (reader only).
#include "../fuzz_target.hpp"

#include <cmath>
#include <stdexcept>

#include "xstage/burstgap/burstgap.hpp"
#include "xstage/dit/safetensors.hpp"
#include "xstage/probe/sweep.hpp"

namespace {

using xs_fuzz::Bytes;

// Seeds: fuzz/corpus/sweep_csv (rows of the committed H200 sweep).
void sweep_run(const std::uint8_t* data, std::size_t size) {
  xs_fuzz::expect_clean([&] { xstage::parse_sweep_csv(xs_fuzz::to_text(data, size), "fuzz.csv"); });
}

XS_FUZZ_TARGET("sweep_csv", [] { return std::vector<Bytes>{}; }, sweep_run);

std::vector<Bytes> params_seeds() {
  xstage::burstgap::Params p;
  p.groups = {xstage::burstgap::example_params("peer"), xstage::burstgap::example_params("local", 4)};
  return {xs_fuzz::to_bytes(xstage::burstgap::params_to_json(p))};
}

// A params file that reads must also predict: its values reach the model's closed forms.
void params_run(const std::uint8_t* data, std::size_t size) {
  xs_fuzz::expect_clean([&] {
    const auto p = xstage::burstgap::params_from_json(xs_fuzz::to_text(data, size), "fuzz.json");
    const auto pr = xstage::burstgap::predict(p.groups.front(), 132, 16384, 2000, 8);
    const bool finite = std::isfinite(pr.steady_issue_ns) && std::isfinite(pr.free_issue_ns) &&
                        !std::isnan(pr.min_gap_ns) && !std::isnan(pr.advice.recommended_gap_ns);
    if (!finite) throw std::runtime_error("fuzz.json: a params file that reads predicts or advises a non-finite time");
  });
}

XS_FUZZ_TARGET("params_json", params_seeds, params_run);

std::vector<Bytes> safetensors_seeds() {
  xstage::dit::StFile f;
  f.metadata["preset"] = "tiny";
  f.tensors.emplace("w", xstage::dit::StTensor::from_f32({1, 2, 3, 4, 5, 6}, {2, 3}, xstage::dit::StDType::bf16));
  f.tensors.emplace("b", xstage::dit::StTensor::from_f32({0.5f, -1}, {2}, xstage::dit::StDType::f32));
  return {xs_fuzz::to_bytes(xstage::dit::serialize_safetensors(f))};
}

void safetensors_run(const std::uint8_t* data, std::size_t size) {
  xs_fuzz::expect_clean([&] {
    const auto f = xstage::dit::parse_safetensors(xs_fuzz::to_text(data, size), "fuzz.safetensors");
    for (const auto& [name, t] : f.tensors) t.to_f32();
  });
}

XS_FUZZ_TARGET("safetensors", safetensors_seeds, safetensors_run);

}  // namespace
