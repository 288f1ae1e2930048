#include "gait/eval/rank1.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/check.hpp"

namespace gait::eval {

const char* probe_set_name(ProbeSet s) {
  switch (s) {
    case ProbeSet::NM: return "NM";
    case ProbeSet::BG: return "BG";
    case ProbeSet::CL: return "CL";
  }
  return "?";
}

namespace {
// numpy.round(x, 2): round half to even on x * 100.
double round2(double x) { return std::nearbyint(x * 100.0) / 100.0; }
}  // namespace

Rank1Result evaluate_rank1(const EmbeddingSet& set, const Protocol& protocol) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  XS_ASSERT(set.channels > 0 && set.parts > 0, "empty embedding set");
  Rank1Result r;
  std::vector<std::size_t> test;
  for (std::size_t i = 0; i < set.size(); ++i)
    if (protocol.is_test(set.keys[i].subject)) test.push_back(i);
  for (std::size_t i : test) r.views.push_back(set.keys[i].view);
  std::sort(r.views.begin(), r.views.end());
  r.views.erase(std::unique(r.views.begin(), r.views.end()), r.views.end());
  const std::size_t nv = r.views.size();
  auto view_index = [&](int v) { return static_cast<std::size_t>(std::lower_bound(r.views.begin(), r.views.end(), v) - r.views.begin()); };

  // Gallery per view, in key order (ties go to the first).
  std::vector<std::vector<std::size_t>> gallery(nv);
  for (std::size_t i : test)
    if (protocol.is_gallery(set.keys[i])) {
      gallery[view_index(set.keys[i].view)].push_back(i);
      ++r.gallery;
    }

  for (std::size_t s = 0; s < kProbeSets.size(); ++s) {
    std::vector<std::vector<std::size_t>> probes(nv);
    for (std::size_t i : test)
      if (protocol.probe_set(set.keys[i]) == kProbeSets[s]) {
        probes[view_index(set.keys[i].view)].push_back(i);
        ++r.probes[s];
      }
    r.acc[s].assign(nv, std::vector<double>(nv, kNaN));
    for (std::size_t v1 = 0; v1 < nv; ++v1) {
      for (std::size_t v2 = 0; v2 < nv; ++v2) {
        if (probes[v1].empty() || gallery[v2].empty()) continue;
        std::size_t hits = 0;
        for (std::size_t p : probes[v1]) {
          double best = std::numeric_limits<double>::infinity();
          int best_subject = -1;
          for (std::size_t g : gallery[v2]) {
            const double d = part_distance(set.row(p), set.row(g), set.channels, set.parts);
            if (d < best) {
              best = d;
              best_subject = set.keys[g].subject;
            }
          }
          hits += best_subject == set.keys[p].subject;
        }
        r.acc[s][v1][v2] = round2(100.0 * static_cast<double>(hits) / static_cast<double>(probes[v1].size()));
      }
    }
    // de_diag: mean over the other views; NaN cells are left out.
    r.per_view[s].assign(nv, kNaN);
    double sum = 0;
    int count = 0;
    for (std::size_t v1 = 0; v1 < nv; ++v1) {
      double row = 0;
      int n = 0;
      for (std::size_t v2 = 0; v2 < nv; ++v2) {
        if (v1 == v2 || std::isnan(r.acc[s][v1][v2])) continue;
        row += r.acc[s][v1][v2];
        ++n;
      }
      if (n > 0) {
        r.per_view[s][v1] = row / n;
        sum += r.per_view[s][v1];
        ++count;
      }
    }
    r.mean[s] = count > 0 ? sum / count : kNaN;
  }
  return r;
}

}  // namespace gait::eval
