#include "gait/protocol.hpp"

#include <algorithm>
#include <cmath>

namespace gait {

std::optional<ProbeSet> Protocol::probe_set(const SequenceKey& k) const {
  if (!is_test(k.subject)) return std::nullopt;
  switch (k.cond) {
    case Condition::NM: return k.seq >= 5 ? std::optional(ProbeSet::NM) : std::nullopt;
    case Condition::BG: return ProbeSet::BG;
    case Condition::CL: return ProbeSet::CL;
  }
  return std::nullopt;
}

Protocol protocol_for_subjects(int subjects) {
  Protocol p;
  if (subjects >= kCasiaSubjects) return p;
  const int t = static_cast<int>(std::lround(subjects * 74.0 / kCasiaSubjects));
  p.train_last_subject = subjects >= 2 ? std::clamp(t, 1, subjects - 1) : subjects;
  return p;
}

namespace {
template <class Pred>
std::vector<std::size_t> select(std::span<const SequenceKey> keys, Pred pred) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < keys.size(); ++i)
    if (pred(keys[i])) out.push_back(i);
  return out;
}
}  // namespace

std::vector<std::size_t> select_train(std::span<const SequenceKey> keys, const Protocol& p) {
  return select(keys, [&](const SequenceKey& k) { return p.is_train(k.subject); });
}
std::vector<std::size_t> select_gallery(std::span<const SequenceKey> keys, const Protocol& p) {
  return select(keys, [&](const SequenceKey& k) { return p.is_gallery(k); });
}
std::vector<std::size_t> select_probes(std::span<const SequenceKey> keys, const Protocol& p, ProbeSet set) {
  return select(keys, [&](const SequenceKey& k) { return p.probe_set(k) == set; });
}

}  // namespace gait
