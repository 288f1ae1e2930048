// The sweep of `xstage bench moe` (host only, so its size is CPU-tested).
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "common/check.hpp"
#include "xstage/bench/moe_bench.hpp"

namespace xstage::moe {

SyntheticRouting BenchConfig::synthetic() const {
  XS_ASSERT(routing == "uniform" || routing == "skewed" || routing == "balanced",
            "bench moe: routing must be uniform, skewed or balanced (got '{}')", routing);
  return {.zipf = routing == "skewed" ? 1.2 : 0.0, .seed = 7, .balanced = routing == "balanced"};
}

std::vector<BenchConfig> bench_sweep(const std::string& name, const std::vector<std::string>& routings) {
  XS_ASSERT(!routings.empty(), "bench moe: a sweep needs at least one routing");
  std::vector<BenchConfig> out;
  if (name == "quick") {
    for (int ep : {2, 4})
      for (const auto& r : routings)
        for (int t : {128, 512}) out.push_back({t, 16, 2, 1024, 512, ep, r});
    return out;
  }
  XS_ASSERT(name == "standard" || name == "eight" || name == "one",
            "bench moe: unknown sweep '{}' (standard | quick | eight | one)", name);
  const std::pair<int, int> ek[] = {{64, 2}, {128, 6}, {256, 6}, {256, 8}};
  const std::pair<int, int> hi[] = {{3072, 8192}, {4096, 2048}, {7168, 3072}};
  // standard: the EP = 2 and 4; eight and one: the same configurations at EP = 8 and 1.
  const std::vector<int> eps = name == "eight" ? std::vector<int>{8}
                               : name == "one" ? std::vector<int>{1}
                                               : std::vector<int>{2, 4};
  // Routing innermost, then tokens: a run cut short by a time budget still has
  // every routing and every token count of the shapes it reached.
  for (int ep : eps)
    for (auto [e, k] : ek)
      for (auto [h, i] : hi)
        for (int t : {128, 512, 2048, 8192})
          for (const auto& r : routings) out.push_back({t, e, k, h, i, ep, r});
  return out;
}

namespace {
template <class T>
bool listed(const std::vector<T>& allowed, const T& v) {
  return allowed.empty() || std::find(allowed.begin(), allowed.end(), v) != allowed.end();
}
}  // namespace

std::vector<BenchConfig> select_rows(const std::string& sweep, const SweepFilter& f) {
  // --only indexes the sweep of the default routings; a routing list otherwise makes the rows.
  std::vector<BenchConfig> configs = f.only < 0 && !f.routing.empty() ? bench_sweep(sweep, f.routing)
                                                                       : bench_sweep(sweep);
  if (f.only >= 0) {
    XS_ASSERT(f.only < int(configs.size()), "bench moe: --only {} but the sweep has {} rows", f.only, configs.size());
    configs = {configs[f.only]};
  }
  std::erase_if(configs, [&](const BenchConfig& b) {
    return !listed(f.ep, b.ep) || !listed(f.tokens, b.tokens_per_rank) || !listed(f.routing, b.routing);
  });
  XS_ASSERT(!configs.empty(), "bench moe: the filters leave no configuration of sweep '{}'", sweep);
  return configs;
}

std::string config_key(const nlohmann::json& r) {
  return fmt::format("{}|{}|{}|{}|{}|{}|{}", r.value("ep", 0), r.value("tokens_per_rank", 0), r.value("experts", 0),
                     r.value("topk", 0), r.value("hidden", 0), r.value("intermediate", 0), r.value("routing", ""));
}

}  // namespace xstage::moe
