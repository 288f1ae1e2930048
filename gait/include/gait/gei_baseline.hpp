// A non-learned reference for a dataset's difficulty: the gait energy image (GEI: the
// mean preprocessed silhouette of a sequence, Han & Bhanu 2006) compared by Euclidean
// distance, scored with the CASIA-B protocol: gallery nm-01..04 of the test subjects,
// probes NM (nm-05..06), BG, CL; for every probe view and every other gallery view, the
// fraction of probes whose nearest gallery GEI (at that gallery view) has the right
// identity; identical views excluded; averaged over gallery views, then probe views.
// Appearance alone: learned models must beat it, and the BG/CL gaps show what bags and
// coats do.
#pragma once

#include <array>
#include <map>
#include <vector>

#include "gait/cache_build.hpp"
#include "gait/protocol.hpp"

namespace gait {

struct BaselineResult {
  int test_subjects = 0;
  std::array<double, 3> rank1{};                     // NM, BG, CL: mean over probe views
  std::array<std::map<int, double>, 3> per_view;     // probe view -> rank-1
};

BaselineResult gei_rank1(const std::vector<CacheEntry>& entries, const Protocol& protocol);

}  // namespace gait
