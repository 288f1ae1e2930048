// Sequence -> embedding with a trained model (LibTorch).
//
// A sequence is embedded whole, as OpenGait tests: its frames in order (the first
// evaluator.max_frames of them), batch 1, model in eval mode (BatchNorm running
// statistics), no augmentation. The embedding is the model's `bn` or `embed` output
// (evaluator.feature), [c, p] floats.
#pragma once

#include <filesystem>
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
  EmbeddingSet embed_all(const std::vector<CachedSequence>& seqs, bool progress);

  const train::Config& config() const { return cfg_; }
  const train::CheckpointMeta& meta() const { return meta_; }
  nets::GaitNet& model() { return model_; }
  int channels() const { return model_->embed_dim(); }
  int parts() const { return model_->parts(); }
  bool needs_pose() const { return model_->uses_pose(); }

 private:
  train::Config cfg_;
  train::CheckpointMeta meta_;
  torch::Device device_;
  nets::GaitNet model_{nullptr};
};

}  // namespace gait::eval
