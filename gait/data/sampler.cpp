#include "gait/sampler.hpp"

#include <algorithm>
#include <map>

#include "common/check.hpp"

namespace gait {

namespace {
template <class T>
void shuffle(std::vector<T>& v, Rng& rng) {
  for (std::size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng.below(static_cast<int>(i))]);
}
}  // namespace

PxKSampler::PxKSampler(std::vector<int> labels, int p, int k, std::uint64_t seed) : p_(p), k_(k), rng_(seed) {
  XS_ASSERT(p >= 1 && k >= 1, "P and K must be at least 1 (got P={}, K={})", p, k);
  std::map<int, std::vector<std::size_t>> by_id;
  for (std::size_t i = 0; i < labels.size(); ++i) by_id[labels[i]].push_back(i);
  for (auto& [id, items] : by_id) {
    ids_.push_back(id);
    items_.push_back(std::move(items));
  }
  XS_ASSERT(static_cast<int>(ids_.size()) >= p, "P={} identities per batch but the set has only {}", p, ids_.size());
  for (std::size_t i = 0; i < ids_.size(); ++i) order_.push_back(i);
  shuffle(order_, rng_);
}

std::vector<std::size_t> PxKSampler::next_batch() {
  std::vector<std::size_t> batch;
  batch.reserve(static_cast<std::size_t>(p_) * k_);
  std::vector<std::size_t> chosen;
  for (int i = 0; i < p_; ++i) {
    if (cursor_ == order_.size()) {
      // New pass; identities already in this batch go last so the batch stays distinct.
      shuffle(order_, rng_);
      std::stable_partition(order_.begin(), order_.end(), [&](std::size_t id) {
        return std::find(chosen.begin(), chosen.end(), id) == chosen.end();
      });
      cursor_ = 0;
    }
    chosen.push_back(order_[cursor_]);
    const auto& items = items_[order_[cursor_++]];
    if (static_cast<int>(items.size()) >= k_) {
      std::vector<std::size_t> pick = items;
      for (int j = 0; j < k_; ++j) std::swap(pick[j], pick[j + rng_.below(static_cast<int>(pick.size()) - j)]);
      batch.insert(batch.end(), pick.begin(), pick.begin() + k_);
    } else {
      for (int j = 0; j < k_; ++j) batch.push_back(items[rng_.below(static_cast<int>(items.size()))]);
    }
  }
  return batch;
}

std::vector<int> sample_clip(std::size_t frames, int length, ClipMode mode, Rng& rng) {
  XS_ASSERT(frames > 0, "cannot sample a clip from an empty sequence");
  XS_ASSERT(length > 0, "clip length must be positive");
  const std::size_t n = static_cast<std::size_t>(length);
  std::size_t start = 0;
  if (mode == ClipMode::RandomContiguous && frames > n) start = static_cast<std::size_t>(rng.below(static_cast<int>(frames - n + 1)));
  std::vector<int> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<int>((start + i) % frames);
  return out;
}

Batch make_batch(std::span<const CachedSequence* const> seqs, std::span<const std::vector<int>> clips,
                 bool silhouettes) {
  XS_ASSERT(seqs.size() == clips.size(), "{} sequences but {} clips", seqs.size(), clips.size());
  Batch b;
  b.n = static_cast<int>(seqs.size());
  b.t = b.n ? static_cast<int>(clips[0].size()) : 0;
  const bool pose = b.n && std::all_of(seqs.begin(), seqs.end(), [](const CachedSequence* s) { return !s->pose.empty(); });
  if (silhouettes) b.sil.resize(static_cast<std::size_t>(b.n) * b.t * kSilPixels);
  if (pose) b.pose.resize(static_cast<std::size_t>(b.n) * b.t * kCocoJoints * 3);
  for (int i = 0; i < b.n; ++i) {
    XS_ASSERT(static_cast<int>(clips[i].size()) == b.t, "clips differ in length");
    const CachedSequence& s = *seqs[i];
    b.labels.push_back(s.key.subject);
    for (int t = 0; t < b.t; ++t) {
      const int f = clips[i][t];
      XS_ASSERT(f >= 0 && static_cast<std::size_t>(f) < s.sil.frames(), "{}: frame {} out of range", sequence_id(s.key), f);
      if (silhouettes) {
        const std::uint8_t* src = s.sil.frame(f);
        float* dst = b.sil.data() + (static_cast<std::size_t>(i) * b.t + t) * kSilPixels;
        for (std::size_t p = 0; p < kSilPixels; ++p) dst[p] = src[p] * (1.0f / 255.0f);
      }
      if (pose) {
        float* pd = b.pose.data() + (static_cast<std::size_t>(i) * b.t + t) * kCocoJoints * 3;
        for (int j = 0; j < kCocoJoints; ++j) {
          pd[j * 3 + 0] = s.pose[f][j].x;
          pd[j * 3 + 1] = s.pose[f][j].y;
          pd[j * 3 + 2] = s.pose[f][j].conf;
        }
      }
    }
  }
  return b;
}

}  // namespace gait
