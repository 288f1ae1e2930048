#include "gait/gei_baseline.hpp"

#include <fmt/format.h>

#include <limits>
#include <set>

#include "common/check.hpp"

namespace gait {

namespace {
using Gei = std::vector<float>;  // [64 * 44]

Gei gei_of(const CachedSequence& s) {
  Gei g(kSilPixels, 0.0f);
  for (std::size_t t = 0; t < s.sil.frames(); ++t)
    for (std::size_t p = 0; p < kSilPixels; ++p) g[p] += s.sil.frame(t)[p];
  const float k = 1.0f / (255.0f * static_cast<float>(std::max<std::size_t>(1, s.sil.frames())));
  for (float& v : g) v *= k;
  return g;
}

double dist2(const Gei& a, const Gei& b) {
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d += (a[i] - b[i]) * (a[i] - b[i]);
  return d;
}
}  // namespace

BaselineResult gei_rank1(const std::vector<CacheEntry>& entries, const Protocol& protocol) {
  struct Item {
    SequenceKey key;
    Gei gei;
  };
  std::vector<Item> gallery, probes;
  std::set<int> subjects;
  for (const auto& e : entries) {
    const bool g = protocol.is_gallery(e.key);
    if (!g && !protocol.probe_set(e.key)) continue;
    Item it{e.key, gei_of(read_cached_sequence(e.path))};
    subjects.insert(e.key.subject);
    (g ? gallery : probes).push_back(std::move(it));
  }
  // Without both there is nothing to rank: a table of zeros would pass for a result.
  if (gallery.empty() || probes.empty())
    throw common::Error(fmt::format("test subjects after {}: {} gallery (nm-01..04) and {} probe sequences; need both",
                                    subject_name(protocol.train_last_subject), gallery.size(), probes.size()));
  BaselineResult r;
  r.test_subjects = static_cast<int>(subjects.size());
  // hits/total per (probe set, probe view, gallery view)
  std::map<std::tuple<int, int, int>, std::pair<int, int>> acc;
  std::set<int> gallery_views;
  for (const auto& g : gallery) gallery_views.insert(g.key.view);
  for (const auto& p : probes) {
    const int set = static_cast<int>(*protocol.probe_set(p.key));
    for (int gv : gallery_views) {
      if (!Protocol::comparable_views(p.key.view, gv)) continue;
      double best = std::numeric_limits<double>::max();
      int who = -1;
      for (const auto& g : gallery)
        if (g.key.view == gv) {
          const double d = dist2(p.gei, g.gei);
          if (d < best) best = d, who = g.key.subject;
        }
      auto& [hits, total] = acc[{set, p.key.view, gv}];
      hits += who == p.key.subject;
      ++total;
    }
  }
  std::array<std::map<int, std::pair<double, int>>, 3> view_sum;
  for (const auto& [k, ht] : acc) {
    auto& [sum, n] = view_sum[std::get<0>(k)][std::get<1>(k)];
    sum += static_cast<double>(ht.first) / ht.second;
    ++n;
  }
  for (int s = 0; s < 3; ++s) {
    double mean = 0;
    for (const auto& [v, sn] : view_sum[s]) {
      r.per_view[s][v] = sn.first / sn.second;
      mean += r.per_view[s][v];
    }
    r.rank1[s] = view_sum[s].empty() ? 0 : mean / static_cast<double>(view_sum[s].size());
  }
  return r;
}

}  // namespace gait
