// The CASIA-B evaluation protocol (the large-sample training setting):
//   train subjects 001-074, test subjects 075-124;
//   gallery nm-01..04; probes nm-05..06 (NM), bg-01..02 (BG), cl-01..02 (CL);
//   rank-1 per probe view excludes the identical gallery view; means are over 11 views.
// Smaller synthetic datasets keep the 74:50 ratio (protocol_for_subjects).
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "gait/casiab.hpp"

namespace gait {

enum class ProbeSet { NM, BG, CL };

struct Protocol {
  int train_last_subject = 74;  // 1..train_last are training identities, the rest test

  bool is_train(int subject) const { return subject <= train_last_subject; }
  bool is_test(int subject) const { return subject > train_last_subject; }
  bool is_gallery(const SequenceKey& k) const { return is_test(k.subject) && k.cond == Condition::NM && k.seq <= 4; }
  std::optional<ProbeSet> probe_set(const SequenceKey& k) const;
  // Rank-1 at a probe view excludes the gallery sequences of the same view.
  static bool comparable_views(int probe_view, int gallery_view) { return probe_view != gallery_view; }
};

// train_last = round(n * 74 / 124), kept within [1, n - 1] when n >= 2.
Protocol protocol_for_subjects(int subjects);

std::vector<std::size_t> select_train(std::span<const SequenceKey> keys, const Protocol& p);
std::vector<std::size_t> select_gallery(std::span<const SequenceKey> keys, const Protocol& p);
std::vector<std::size_t> select_probes(std::span<const SequenceKey> keys, const Protocol& p, ProbeSet set);

}  // namespace gait
