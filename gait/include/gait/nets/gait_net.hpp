// The two-branch network and its heads (OpenGait's shape: a model only builds its
// modules and computes its outputs; the losses read them by name).
//
//   two_branch:  f_i = [CNN(sil)_i ; GCN(pose)]   per CNN part i: the part's silhouette
//                                                 feature and the whole-body skeleton feature
//                                                 [n, c_s + c_g, p]
//   silhouette:  f = CNN(sil)                     [n, c_s, p]
//   skeleton:    f = GCN(pose)                    [n, c_g, 1]
//   embed  = SeparateFCs(f)                       [n, d, p]   one FC per part (no weight sharing)
//   bn     = BNNeck(embed)                        [n, d, p]   BatchNorm1d over the d * p features
//   logits = SeparateFCs(bn)                      [n, classes, p]
//
// Losses (losses.hpp): triplet on `embed`, cross-entropy on `logits` (from the BN
// features). At test time the embedding is `bn` or `embed` (evaluator.feature) of the
// heads evaluator.heads names (the fused head, or with the branch heads' parts too) and
// distances are per-part Euclidean averaged over parts, as OpenGait computes them.
//
// two_branch extras (model.fusion; training only, unless evaluator.heads asks for the
// branch heads' embeddings at test time too):
//   branch heads  (branch_loss_weight > 0) the same SeparateFCs -> BNNeck -> classifier
//                 on CNN(sil) alone [n, c_s, p] and on GCN(pose) alone [n, c_g, 1], each
//                 with its own triplet + CE, so neither branch stops learning once the
//                 fused head fits the training identities through the other;
//   branch drop   (modality_dropout p) per step the trainer zeroes one branch in the
//                 fused input, each with probability p/2 (FusionDrop).
#pragma once

#include "gait/nets/cnn_branch.hpp"
#include "gait/nets/gcn_branch.hpp"
#include "gait/train/config.hpp"

namespace gait::nets {

// p independent linear maps: [n, c_in, p] -> [n, c_out, p]; weight [p, c_in, c_out], Xavier-uniform.
class SeparateFCsImpl : public torch::nn::Module {
 public:
  SeparateFCsImpl(int parts, int in, int out);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::Tensor weight_;
};
TORCH_MODULE(SeparateFCs);

// An embedding head: [n, c, p] -> embed [n, d, p] (SeparateFCs), bn [n, d, p]
// (BatchNorm1d over d * p), logits [n, classes, p] (SeparateFCs on bn).
struct HeadOutput {
  torch::Tensor embed;   // [n, d, p]
  torch::Tensor bn;      // [n, d, p]
  torch::Tensor logits;  // [n, classes, p]
};
class HeadImpl : public torch::nn::Module {
 public:
  HeadImpl(int parts, int in, int embed_dim, int classes);
  HeadOutput forward(const torch::Tensor& f);

 private:
  int parts_, embed_dim_;
  SeparateFCs fc_{nullptr}, classifier_{nullptr};
  torch::nn::BatchNorm1d bnneck_{nullptr};
};
TORCH_MODULE(Head);

// Which branch the fused head does not see in this training step (modality dropout).
enum class FusionDrop { none, silhouette, skeleton };

class GaitNetImpl : public torch::nn::Module {
 public:
  GaitNetImpl(const train::ModelConfig& cfg, int num_classes);

  struct Output : HeadOutput {   // the fused head: the model's embedding
    std::vector<HeadOutput> branches;  // two_branch with branch heads, in training or with_branches: silhouette, skeleton
  };
  // sil [n, s, 64, 44] in [0, 1]; pose [n, s, 17, 3]. The input of a branch that is off
  // may be undefined. `drop` (two_branch, training only) zeroes one branch in the fused input.
  // with_branches: the branch heads' outputs in eval mode too (needs has_branch_heads()).
  Output forward(const torch::Tensor& sil, const torch::Tensor& pose, FusionDrop drop = FusionDrop::none,
                 bool with_branches = false);

  bool uses_silhouettes() const { return !cnn_.is_empty(); }
  bool uses_pose() const { return !gcn_.is_empty(); }
  bool has_branch_heads() const { return !sil_head_.is_empty(); }
  int parts() const { return parts_; }
  int embed_dim() const { return embed_dim_; }
  int classes() const { return classes_; }

 private:
  int parts_ = 1, embed_dim_ = 0, classes_ = 0;
  CnnBranch cnn_{nullptr};
  GcnBranch gcn_{nullptr};
  // The fused head's modules (named fc / bnneck / classifier in checkpoints).
  SeparateFCs fc_{nullptr}, classifier_{nullptr};
  torch::nn::BatchNorm1d bnneck_{nullptr};
  Head sil_head_{nullptr}, skel_head_{nullptr};  // branch heads (two_branch, branch_loss_weight > 0)
};
TORCH_MODULE(GaitNet);

}  // namespace gait::nets
