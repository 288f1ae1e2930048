// Sequence -> embedding with a trained model (LibTorch).
//
// A sequence is embedded whole, as OpenGait tests: its frames in order (the first
// evaluator.max_frames of them), model in eval mode (BatchNorm running statistics), no
// augmentation. embed_all batches sequences of equal length (evaluator.batch_frames
// frames per pass); the result equals one-at-a-time embedding up to float rounding. The embedding is the model's `bn` or `embed` output
// (evaluator.feature) of the heads evaluator.heads names, [c, p] floats (p: parts()).
#pragma once

#include <filesystem>
#include <span>
#include <vector>

#include "gait/eval/embeddings.hpp"
#include "gait/nets/gait_net.hpp"
#include "gait/seq_cache.hpp"
#include "gait/train/checkpoint.hpp"
#include "gait/train/config.hpp"

namespace gait::eval {

class Embedder {
 public:
  // Rebuilds the model from the checkpoint's stored config and loads its weights.
  Embedder(const std::filesystem::path& checkpoint, torch::Device device);
  // Wraps a live model (tests, benchmarks).
  Embedder(nets::GaitNet model, train::Config cfg, torch::Device device);

  std::vector<float> embed(const CachedSequence& seq);  // [c * p]
  // All sequences, in their order; same-length sequences share forward passes.
  EmbeddingSet embed_all(const std::vector<CachedSequence>& seqs, bool progress);

  const train::Config& config() const { return cfg_; }
  const train::CheckpointMeta& meta() const { return meta_; }
  nets::GaitNet& model() { return model_; }
  int channels() const { return model_->embed_dim(); }
  int parts() const;  // of the embedding: the model's parts, 3x for fused+branches, 1 for the skeleton head
  // Overrides the checkpoint's evaluator.heads (gait eval / embed / identify --heads);
  // a head the model lacks is an error.
  void set_heads(train::EvalHeads heads);
  void set_skeleton_scale(double scale);  // evaluator.skeleton_scale; >= 0
  bool needs_pose() const { return model_->uses_pose(); }

 private:
  int64_t frames_used(const CachedSequence& seq) const;
  // batch: sequences with at least t frames (and pose rows when the model reads them) -> [b, c * p] float, CPU
  torch::Tensor forward_batch(std::span<const CachedSequence* const> batch, int64_t t);

  train::Config cfg_;
  train::CheckpointMeta meta_;
  torch::Device device_;
  nets::GaitNet model_{nullptr};
};

}  // namespace gait::eval
