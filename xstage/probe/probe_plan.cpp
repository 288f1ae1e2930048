// Host part of the probe that needs no GPU: who rank 0 stores to, which rows go
// where, and the sweep the model is fitted from (CPU-tested for up to 8 GPUs).
#include <algorithm>
#include <string>
#include <vector>

#include "common/check.hpp"
#include "xstage/probe/probe.hpp"
#include "xstage/probe/sweep.hpp"

namespace xstage::probe {

std::vector<int> destinations(const std::string& pattern, int gpus) {
  XS_ASSERT(is_valid_pattern(pattern), "unknown pattern '{}' (local, peer, all_peers, host)", pattern);
  XS_ASSERT(gpus >= 1, "the probe needs at least one GPU (got {})", gpus);
  if (pattern == "local" || pattern == "host") return {0};
  XS_ASSERT(gpus >= 2, "pattern '{}' needs at least 2 GPUs (got {})", pattern, gpus);
  if (pattern == "peer") return {1};
  XS_ASSERT(gpus - 1 <= kMaxDst, "pattern all_peers on {} GPUs: {} destinations, the sender takes at most {}", gpus,
            gpus - 1, kMaxDst);
  std::vector<int> d;
  for (int r = 1; r < gpus; ++r) d.push_back(r);
  return d;
}

namespace {

using B = std::size_t;

// Gaps dense enough to place the smallest backpressure-free gap within ~20%.
const std::vector<double> kGaps = {0,    500,  1000, 1500,  2000,  2500,  3000,  4000,
                                   5000, 6000, 8000, 10000, 12000, 15000, 20000, 30000};

std::vector<std::string> default_patterns(int gpus) {
  std::vector<std::string> p = {"local"};
  if (gpus >= 2) p.push_back("peer");
  if (gpus >= 3) p.push_back("all_peers");
  return p;
}

void quick_sweep(std::vector<ProbeConfig>& out, const std::string& p, int sm_count) {
  for (B b : {B{4096}, B{16384}, B{65536}})
    for (double g : {0.0, 2000.0, 10000.0}) out.push_back({p, "st16", "issue", sm_count, b, g});
  if (p == "peer" || p == "host") out.push_back({p, "st16", "visible", sm_count, 16384, 10000});
}

// Issue time against burst size per gap at the full SM count, then drain and capacity
// against the SM count.
void pattern_sweep(std::vector<ProbeConfig>& out, const std::string& p, int sm_count) {
  for (B b : {B{1024}, B{2048}, B{4096}, B{8192}, B{12288}, B{16384}, B{24576}, B{32768}, B{49152}, B{65536},
              B{98304}, B{131072}})
    for (double g : kGaps) out.push_back({p, "st16", "issue", sm_count, b, g});
  std::vector<int> sms_list;
  for (int s : {1, 2, 4, 8, 16, 33, 66, 99})
    if (s < sm_count) sms_list.push_back(s);
  // The host link drains ~8x slower than NVLink: its recovery gaps reach further.
  std::vector<double> sm_gaps = {0.0, 1000.0, 2000.0, 4000.0, 6000.0, 10000.0, 20000.0};
  if (p == "host") sm_gaps.insert(sm_gaps.end(), {50000.0, 100000.0});
  for (int s : sms_list)
    for (B b : {B{4096}, B{16384}, B{65536}, B{131072}})
      for (double g : sm_gaps) out.push_back({p, "st16", "issue", s, b, g});
  if (p == "host")  // long gaps at the full SM count: where the big bursts recover
    for (B b : {B{4096}, B{16384}, B{65536}, B{131072}})
      for (double g : {50000.0, 100000.0, 200000.0}) out.push_back({p, "st16", "issue", sm_count, b, g});
}

// Store kinds and visible mode on a point-to-point link pattern (peer, host); all_peers
// gets visible mode beside peer's.
void link_sweep(std::vector<ProbeConfig>& out, const std::string& link, const std::vector<std::string>& patterns,
                int sm_count) {
  std::vector<double> gaps = kGaps;
  if (link == "host") gaps.insert(gaps.end(), {50000.0, 100000.0, 200000.0});  // its slow drain (pattern_sweep)
  for (const std::string st : {"st4", "st8", "tma"})
    for (B b : {B{4096}, B{16384}, B{65536}})
      for (double g : gaps) out.push_back({link, st, "issue", sm_count, b, g});
  const bool all = std::find(patterns.begin(), patterns.end(), "all_peers") != patterns.end();
  for (B b : {B{4096}, B{16384}, B{65536}})
    for (double g : {0.0, 10000.0}) {
      out.push_back({link, "st16", "visible", sm_count, b, g});
      if (all && link == "peer") out.push_back({"all_peers", "st16", "visible", sm_count, b, g});
    }
}

}  // namespace

std::vector<ProbeConfig> standard_sweep(int gpus, int sm_count, bool quick, const std::vector<std::string>& given) {
  const std::vector<std::string> patterns = given.empty() ? default_patterns(gpus) : given;
  for (const auto& p : patterns) (void)destinations(p, gpus);  // known, and enough GPUs for it
  std::vector<ProbeConfig> out;
  for (const auto& p : patterns) {
    if (quick) quick_sweep(out, p, sm_count);
    else pattern_sweep(out, p, sm_count);
  }
  if (!quick)
    for (const auto& p : patterns)
      if (p == "peer" || p == "host") link_sweep(out, p, patterns, sm_count);
  return out;
}

}  // namespace xstage::probe
