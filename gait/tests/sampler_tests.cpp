// Protocol split, P x K sampling, clip sampling and batch conversion.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "common/check.hpp"
#include "gait/protocol.hpp"
#include "gait/sampler.hpp"

namespace gait {
namespace {

std::vector<SequenceKey> full_casia_keys() {
  std::vector<SequenceKey> keys;
  for (int s = 1; s <= kCasiaSubjects; ++s)
    for (auto [c, n] : standard_sequences())
      for (int v : standard_views()) keys.push_back({s, c, n, v});
  return keys;
}

TEST(Protocol, StandardSplitCounts) {
  const auto keys = full_casia_keys();
  ASSERT_EQ(keys.size(), 124u * 10 * 11);
  const Protocol p;
  EXPECT_EQ(select_train(keys, p).size(), 74u * 110);
  EXPECT_EQ(select_gallery(keys, p).size(), 50u * 4 * 11);
  for (auto set : {ProbeSet::NM, ProbeSet::BG, ProbeSet::CL}) EXPECT_EQ(select_probes(keys, p, set).size(), 50u * 2 * 11);
  EXPECT_TRUE(p.is_train(74));
  EXPECT_TRUE(p.is_test(75));
  EXPECT_FALSE(Protocol::comparable_views(90, 90));
}

TEST(Protocol, SmallDatasetsKeepTheRatio) {
  EXPECT_EQ(protocol_for_subjects(124).train_last_subject, 74);
  EXPECT_EQ(protocol_for_subjects(8).train_last_subject, 5);
  EXPECT_EQ(protocol_for_subjects(2).train_last_subject, 1);
}

TEST(PxKSampler, BatchesHavePDistinctIdentitiesWithKEach) {
  std::vector<int> labels;
  for (int id = 1; id <= 9; ++id)
    for (int i = 0; i < (id == 3 ? 2 : 6); ++i) labels.push_back(id);  // identity 3 has fewer than K
  PxKSampler s(labels, 4, 4, 42);
  std::map<int, int> seen;
  for (int b = 0; b < 20; ++b) {
    const auto batch = s.next_batch();
    ASSERT_EQ(batch.size(), 16u);
    std::set<int> ids;
    for (int p = 0; p < 4; ++p) {
      const int id = labels[batch[p * 4]];
      ids.insert(id);
      ++seen[id];
      std::set<std::size_t> items;
      for (int k = 0; k < 4; ++k) {
        EXPECT_EQ(labels[batch[p * 4 + k]], id);
        items.insert(batch[p * 4 + k]);
      }
      if (id != 3) EXPECT_EQ(items.size(), 4u);  // without replacement when possible
    }
    EXPECT_EQ(ids.size(), 4u);
  }
  EXPECT_EQ(seen.size(), 9u);
  PxKSampler again(labels, 4, 4, 42);
  PxKSampler first(labels, 4, 4, 42);
  EXPECT_EQ(again.next_batch(), first.next_batch());
  EXPECT_THROW(PxKSampler(labels, 10, 2, 1), common::Error);
}

TEST(Clips, ContiguousOrderedAndLooped) {
  Rng rng(5);
  for (int i = 0; i < 50; ++i) {
    const auto c = sample_clip(80, 30, ClipMode::RandomContiguous, rng);
    ASSERT_EQ(c.size(), 30u);
    EXPECT_LE(c.back(), 79);
    for (int t = 1; t < 30; ++t) EXPECT_EQ(c[t], c[t - 1] + 1);
  }
  EXPECT_EQ(sample_clip(80, 30, ClipMode::Ordered, rng).front(), 0);
  const auto looped = sample_clip(12, 30, ClipMode::RandomContiguous, rng);
  EXPECT_EQ(looped[12], 0);
  EXPECT_EQ(looped[29], 29 % 12);
}

TEST(Batch, FloatConversionAndShapes) {
  CachedSequence s;
  s.key = {5, Condition::NM, 1, 90};
  for (int t = 0; t < 3; ++t) {
    s.sil.frame_ids.push_back(t + 1);
    s.sil.pixels.insert(s.sil.pixels.end(), kSilPixels, static_cast<std::uint8_t>(t == 1 ? 255 : 51));
    PoseFrame f;
    f[kNose] = {1, 2, 0.5f};
    s.pose.push_back(f);
  }
  const CachedSequence* seqs[] = {&s, &s};
  const std::vector<std::vector<int>> clips = {{0, 1}, {1, 2}};
  const Batch b = make_batch(seqs, clips);
  EXPECT_EQ(b.n, 2);
  EXPECT_EQ(b.t, 2);
  ASSERT_EQ(b.sil.size(), 2u * 2 * 64 * 44);
  ASSERT_EQ(b.pose.size(), 2u * 2 * 17 * 3);
  EXPECT_FLOAT_EQ(b.sil[0], 0.2f);
  EXPECT_FLOAT_EQ(b.sil[kSilPixels], 1.0f);
  EXPECT_FLOAT_EQ(b.pose[2], 0.5f);
  EXPECT_EQ(b.labels, (std::vector<int>{5, 5}));
  // A skeleton-only model's batch: no silhouettes, the same pose.
  const Batch p = make_batch(seqs, clips, /*silhouettes=*/false);
  EXPECT_TRUE(p.sil.empty());
  EXPECT_EQ(p.pose, b.pose);
  EXPECT_EQ(p.labels, b.labels);
}

}  // namespace
}  // namespace gait
