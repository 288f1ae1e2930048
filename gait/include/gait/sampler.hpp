// Training-batch sampling: P x K identity batches, 30-frame clips, and the float
// conversion done at batch time.
//
//   PxKSampler: each batch holds P distinct identities (drawn without replacement
//   from a shuffled pass over all identities, reshuffled when exhausted) and K
//   sequences of each (without replacement when the identity has >= K, else with).
//   sample_clip: `length` frame indices of a sequence, contiguous from a random start
//   (RandomContiguous) or from the first frame (Ordered); sequences shorter than
//   `length` are looped, as OpenGait does.
//   make_batch: sil [n, t, 64, 44] floats in [0, 1]; pose [n, t, 17, 3] (x, y, conf) floats.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "gait/casiab.hpp"
#include "gait/rng.hpp"
#include "gait/seq_cache.hpp"

namespace gait {

inline constexpr int kDefaultClipLength = 30;

class PxKSampler {
 public:
  // labels[i]: identity of item i. Throws if fewer than P identities exist or P, K < 1.
  PxKSampler(std::vector<int> labels, int p, int k, std::uint64_t seed);
  std::vector<std::size_t> next_batch();  // P * K item indices, grouped by identity
  int identities() const { return static_cast<int>(ids_.size()); }

 private:
  std::vector<int> ids_;
  std::vector<std::vector<std::size_t>> items_;  // per identity
  std::vector<std::size_t> order_;
  std::size_t cursor_ = 0;
  int p_, k_;
  Rng rng_;
};

enum class ClipMode { RandomContiguous, Ordered };
std::vector<int> sample_clip(std::size_t frames, int length, ClipMode mode, Rng& rng);

struct Batch {
  int n = 0, t = 0;
  std::vector<float> sil;   // [n, t, 64, 44]
  std::vector<float> pose;  // [n, t, 17, 3]; empty when the sequences have no pose
  std::vector<int> labels;  // subject ids
};
// clips[i] indexes frames of seqs[i]; all clips have the same length. Without
// `silhouettes` (a skeleton-only model) `sil` stays empty.
Batch make_batch(std::span<const CachedSequence* const> seqs, std::span<const std::vector<int>> clips,
                 bool silhouettes = true);

}  // namespace gait
