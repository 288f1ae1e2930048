#include "gait/eval/rank1.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/check.hpp"
#include "common/parallel.hpp"

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

// Rows copied part-major ([p][c], each part's channels contiguous; the set stores
// [c][p]) so a distance streams through memory.
std::vector<float> part_major(const EmbeddingSet& set, const std::vector<std::size_t>& rows) {
  const std::size_t C = set.channels, P = set.parts;
  std::vector<float> out(rows.size() * C * P);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const float* src = set.row(rows[r]);
    float* dst = out.data() + r * C * P;
    for (std::size_t c = 0; c < C; ++c)
      for (std::size_t p = 0; p < P; ++p) dst[p * C + c] = src[c * P + p];
  }
  return out;
}

// part_distance on part-major rows, in double, four partial sums per part.
double part_major_distance(const float* a, const float* b, int channels, int parts) {
  double total = 0;
  for (int p = 0; p < parts; ++p) {
    const float* x = a + static_cast<std::size_t>(p) * channels;
    const float* y = b + static_cast<std::size_t>(p) * channels;
    double s[4] = {0, 0, 0, 0};
    int c = 0;
    for (; c + 4 <= channels; c += 4)
      for (int k = 0; k < 4; ++k) {
        const double d = static_cast<double>(x[c + k]) - y[c + k];
        s[k] += d * d;
      }
    for (; c < channels; ++c) {
      const double d = static_cast<double>(x[c]) - y[c];
      s[0] += d * d;
    }
    total += std::sqrt((s[0] + s[1]) + (s[2] + s[3]));
  }
  return total / parts;
}
}  // namespace

PairDistances pair_distances(const EmbeddingSet& set, const Protocol& protocol, int threads) {
  XS_ASSERT(set.channels > 0 && set.parts > 0, "empty embedding set");
  PairDistances out;
  for (std::size_t i = 0; i < set.size(); ++i) {
    if (!protocol.is_test(set.keys[i].subject)) continue;
    if (protocol.is_gallery(set.keys[i])) out.gallery.push_back(i);
    else if (protocol.probe_set(set.keys[i])) out.probes.push_back(i);
  }
  const std::vector<float> pm = part_major(set, out.probes), gm = part_major(set, out.gallery);
  const std::size_t row = set.row_size(), ng = out.gallery.size();
  out.d.assign(out.probes.size() * ng, 0.0);
  common::parallel_for(out.probes.size(), threads, [&](std::size_t p) {
    for (std::size_t g = 0; g < ng; ++g)
      out.d[p * ng + g] = part_major_distance(pm.data() + p * row, gm.data() + g * row, set.channels, set.parts);
  });
  return out;
}

Rank1Result rank1_from_distances(const std::vector<SequenceKey>& keys, const Protocol& protocol,
                                 const PairDistances& d) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  const std::size_t ng = d.gallery.size();
  XS_ASSERT(d.d.size() == d.probes.size() * ng, "distance matrix is {} values for {} x {} pairs", d.d.size(),
            d.probes.size(), ng);
  Rank1Result r;
  for (const auto* rows : {&d.probes, &d.gallery})
    for (std::size_t i : *rows) {
      XS_ASSERT(i < keys.size(), "distance row {} is outside the {} keys", i, keys.size());
      r.views.push_back(keys[i].view);
    }
  std::sort(r.views.begin(), r.views.end());
  r.views.erase(std::unique(r.views.begin(), r.views.end()), r.views.end());
  const std::size_t nv = r.views.size();
  auto view_index = [&](int v) { return static_cast<std::size_t>(std::lower_bound(r.views.begin(), r.views.end(), v) - r.views.begin()); };

  // Gallery per view, in key order (ties go to the first); `at` is the matrix column.
  std::vector<std::vector<std::size_t>> gallery(nv);
  for (std::size_t g = 0; g < ng; ++g) gallery[view_index(keys[d.gallery[g]].view)].push_back(g);
  r.gallery = ng;

  for (std::size_t s = 0; s < kProbeSets.size(); ++s) {
    std::vector<std::vector<std::size_t>> probes(nv);
    for (std::size_t p = 0; p < d.probes.size(); ++p)
      if (protocol.probe_set(keys[d.probes[p]]) == kProbeSets[s]) {
        probes[view_index(keys[d.probes[p]].view)].push_back(p);
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
            const double dist = d.d[p * ng + g];
            if (dist < best) {
              best = dist;
              best_subject = keys[d.gallery[g]].subject;
            }
          }
          hits += best_subject == keys[d.probes[p]].subject;
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

Rank1Result evaluate_rank1(const EmbeddingSet& set, const Protocol& protocol, int threads) {
  return rank1_from_distances(set.keys, protocol, pair_distances(set, protocol, threads));
}

EmbeddingSet slice_parts(const EmbeddingSet& set, int first, int count) {
  XS_ASSERT(first >= 0 && count >= 1 && first + count <= set.parts, "parts [{}, {}) of an embedding with {} parts",
            first, first + count, set.parts);
  EmbeddingSet out;
  out.channels = set.channels;
  out.parts = count;
  out.keys = set.keys;
  out.data.resize(set.size() * out.row_size());
  for (std::size_t i = 0; i < set.size(); ++i)
    for (int c = 0; c < set.channels; ++c)
      std::copy_n(set.row(i) + static_cast<std::size_t>(c) * set.parts + first, count,
                  out.data.data() + i * out.row_size() + static_cast<std::size_t>(c) * count);
  return out;
}

}  // namespace gait::eval
