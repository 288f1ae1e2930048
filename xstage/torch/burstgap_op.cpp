// torch.ops.xstage.burstgap_predict / advise: the Burst-Gap model and advisor of
// xstage/burstgap on the CPU. Plain values in, JSON text out (the Python package turns
// it into a dict), so a scheduler written in Python asks the same code the fused
// kernels do.
#include <torch/version.h>

#include <cctype>
#include <cmath>
#include <nlohmann/json.hpp>

#include "checks.hpp"
#include "ops.hpp"
#include "xstage/burstgap/burstgap.hpp"

namespace xstage::torch_ops {

namespace {
constexpr const char* kPredict = "xstage.burstgap_predict";
constexpr const char* kAdvise = "xstage.advise";

// "" -> the shipped H200 fits; JSON text (starts with '{') -> parsed; else a file path.
burstgap::Params load_params(const std::string& params) {
  std::size_t i = 0;
  while (i < params.size() && std::isspace(static_cast<unsigned char>(params[i]))) ++i;
  if (params.empty()) return burstgap::read_params_or_default("");
  if (i < params.size() && params[i] == '{') return burstgap::params_from_json(params, "params (JSON text)");
  return burstgap::read_params(params);
}

void check_profile(const char* op, int64_t sms, double bytes, double gap_ns, int64_t bursts) {
  check_value(sms >= 1 && sms <= 100000, op, "sms must be in 1..100000, got " + std::to_string(sms));
  check_value(std::isfinite(bytes) && bytes >= 1, op, "the burst must be at least 1 byte, got " + std::to_string(bytes));
  check_value(std::isfinite(gap_ns) && gap_ns >= 0, op, "the gap must be a finite number of ns >= 0, got " +
                                                            std::to_string(gap_ns));
  check_value(bursts >= 1 && bursts <= 100000, op, "bursts must be in 1..100000, got " + std::to_string(bursts));
}

nlohmann::json finite_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }
}  // namespace

std::string burstgap_predict(const std::string& params, int64_t sms, double burst_bytes, double gap_ns,
                             int64_t bursts, const std::string& pattern, const std::string& store, int64_t gpus) {
  check_profile(kPredict, sms, burst_bytes, gap_ns, bursts);
  return translate_errors(kPredict, [&] {
    const burstgap::Params p = load_params(params);
    const burstgap::ModelParams& m = p.find(pattern, store, int(gpus));
    return burstgap::prediction_to_json(burstgap::predict(m, int(sms), burst_bytes, gap_ns, int(bursts)));
  });
}

std::string burstgap_advise(const std::string& params, int64_t bytes_per_burst, int64_t sms,
                            double compute_ns_between_bursts, int64_t bursts, const std::string& pattern,
                            const std::string& store, int64_t gpus) {
  check_profile(kAdvise, sms, double(bytes_per_burst), compute_ns_between_bursts, bursts);
  return translate_errors(kAdvise, [&] {
    const burstgap::Params p = load_params(params);
    const burstgap::ModelParams& m = p.find(pattern, store, int(gpus));
    burstgap::BurstProfile prof;
    prof.bytes_per_burst = std::size_t(bytes_per_burst);
    prof.sms = int(sms);
    prof.compute_ns_between_bursts = compute_ns_between_bursts;
    prof.bursts = int(bursts);
    prof.pattern = pattern;
    prof.store = store;
    const burstgap::Advice a = burstgap::advise(m, prof);
    nlohmann::json j;
    j["remedy"] = burstgap::to_string(a.remedy);
    j["predicted_stall_ns"] = a.predicted_stall_ns;
    j["stall_ns_per_burst"] = a.stall_ns_per_burst;
    j["backpressure_after_bursts"] = a.backpressure_after_bursts;
    j["min_gap_ns"] = finite_or_null(a.min_gap_ns);
    j["max_burst_bytes"] = finite_or_null(a.max_burst_bytes);
    j["recommended_split"] = a.recommended_split;
    j["recommended_sms"] = a.recommended_sms;
    j["recommended_gap_ns"] = finite_or_null(a.recommended_gap_ns);
    j["reason"] = a.reason;
    j["params"] = {{"pattern", m.pattern}, {"store", m.store}, {"gpus", m.gpus}};
    return j.dump();
  });
}

std::string build_info() {
  nlohmann::json j;
  j["torch_built_against"] = TORCH_VERSION;
#if XSTAGE_TORCH_CUDA
  j["cuda_kernels"] = true;
#else
  j["cuda_kernels"] = false;
#endif
#if XSTAGE_TORCH_GAIT
  j["gait"] = true;  // torch.ops.gait and torch.classes.gait.Model (python: xstage.gait)
#else
  j["gait"] = false;
#endif
  return j.dump();
}

}  // namespace xstage::torch_ops
