// Host part of the probe that needs no GPU: who rank 0 stores to, which rows go
// where, and the sweep the model is fitted from (CPU-tested for up to 8 GPUs).
#include <string>
#include <vector>

#include "common/check.hpp"
#include "xstage/probe/probe.hpp"
#include "xstage/probe/sweep.hpp"

namespace xstage::probe {

std::vector<int> destinations(const std::string& pattern, int gpus) {
  XS_ASSERT(is_valid_pattern(pattern), "unknown pattern '{}' (local, peer, all_peers)", pattern);
  XS_ASSERT(gpus >= 1, "the probe needs at least one GPU (got {})", gpus);
  if (pattern == "local") return {0};
  XS_ASSERT(gpus >= 2, "pattern '{}' needs at least 2 GPUs (got {})", pattern, gpus);
  if (pattern == "peer") return {1};
  XS_ASSERT(gpus - 1 <= kMaxDst, "pattern all_peers on {} GPUs: {} destinations, the sender takes at most {}", gpus,
            gpus - 1, kMaxDst);
  std::vector<int> d;
  for (int r = 1; r < gpus; ++r) d.push_back(r);
  return d;
}

std::vector<ProbeConfig> standard_sweep(int gpus, int sm_count, bool quick) {
  std::vector<ProbeConfig> out;
  std::vector<std::string> patterns = {"local"};
  if (gpus >= 2) patterns.push_back("peer");
  if (gpus >= 3) patterns.push_back("all_peers");
  std::vector<int> sms_list;
  for (int s : {1, 2, 4, 8, 16, 33, 66, 99})
    if (s < sm_count) sms_list.push_back(s);
  using B = std::size_t;
  // Gaps dense enough to place the smallest backpressure-free gap within ~20%.
  const std::vector<double> gaps = {0,    500,  1000, 1500,  2000,  2500,  3000,  4000,
                                    5000, 6000, 8000, 10000, 12000, 15000, 20000, 30000};
  if (quick) {
    for (const auto& p : patterns)
      for (B b : {B{4096}, B{16384}, B{65536}})
        for (double g : {0.0, 2000.0, 10000.0}) out.push_back({p, "st16", "issue", sm_count, b, g});
    if (gpus >= 2) out.push_back({"peer", "st16", "visible", sm_count, 16384, 10000});
    return out;
  }
  for (const auto& p : patterns) {
    // Issue time vs burst size per gap at the full SM count.
    for (B b : {B{1024}, B{2048}, B{4096}, B{8192}, B{12288}, B{16384}, B{24576}, B{32768}, B{49152}, B{65536},
                B{98304}, B{131072}})
      for (double g : gaps) out.push_back({p, "st16", "issue", sm_count, b, g});
    // Drain and capacity vs SM count.
    for (int s : sms_list)
      for (B b : {B{4096}, B{16384}, B{65536}, B{131072}})
        for (double g : {0.0, 1000.0, 2000.0, 4000.0, 6000.0, 10000.0, 20000.0})
          out.push_back({p, "st16", "issue", s, b, g});
  }
  if (gpus >= 2) {
    for (const std::string st : {"st4", "st8", "tma"})
      for (B b : {B{4096}, B{16384}, B{65536}})
        for (double g : gaps) out.push_back({"peer", st, "issue", sm_count, b, g});
    for (B b : {B{4096}, B{16384}, B{65536}})
      for (double g : {0.0, 10000.0}) {
        out.push_back({"peer", "st16", "visible", sm_count, b, g});
        if (gpus >= 3) out.push_back({"all_peers", "st16", "visible", sm_count, b, g});
      }
  }
  return out;
}

}  // namespace xstage::probe
