// Training losses, as OpenGait defines them (opengait/modeling/losses).
//
// Triplet (margin m, on embed [n, c, p]), per part p with d the Euclidean distance:
//   batch_all:  every (anchor a, positive q, negative k) with label(q) = label(a) (q = a
//               included, as in OpenGait) and label(k) != label(a):
//                 l = max(0, d(a, q) - d(a, k) + m)
//               averaged over the non-zero terms (0 when all are zero), then over parts.
//   hard:       per anchor, the farthest positive and the closest negative:
//                 l = max(0, max_q d(a, q) - min_k d(a, k) + m), averaged over anchors and parts.
// Cross-entropy (on logits [n, classes, p] read from the BN features): mean over samples
// and parts, with label smoothing.
// gait_loss: triplet_weight * triplet + ce_weight * CE of the model's (fused) head, plus
// branch_weight times the same sum for each branch head (two_branch with branch heads).
#pragma once

#include <vector>

#include "gait/nets/gait_net.hpp"

namespace gait::nets {

// Statistics are 0-dim float tensors on the loss's device: reading them is the caller's
// choice (the trainer reads all of a step's in one copy, so the step has one host sync).
struct TripletStats {
  torch::Tensor active;  // fraction of triplets (batch_all) or anchors (hard) with a non-zero loss
};

// Pairwise Euclidean distances per part: [n, c, p] -> [p, n, n].
torch::Tensor part_distances(const torch::Tensor& embed);

torch::Tensor triplet_loss(const torch::Tensor& embed, const torch::Tensor& labels, double margin,
                           train::TripletMining mining, TripletStats* stats = nullptr);
torch::Tensor part_cross_entropy(const torch::Tensor& logits, const torch::Tensor& labels, double smoothing,
                                 torch::Tensor* accuracy = nullptr);

struct LossTerms {
  torch::Tensor total;
  // 0-dim float tensors, like TripletStats; 0 where a term's weight is 0.
  torch::Tensor triplet, ce, accuracy, active;  // the model's (fused) head
  torch::Tensor branches;  // the branch heads' triplet + CE, summed and unweighted (0 without them)
  // [total, triplet, ce, accuracy, active, branches] in one float tensor on the loss's
  // device (what a captured training step leaves for the host to read after each replay).
  torch::Tensor packed() const;
  // packed() on the CPU: one sync.
  std::vector<double> read() const { return unpack(packed()); }
  static std::vector<double> unpack(const torch::Tensor& packed);
};
LossTerms gait_loss(const GaitNetImpl::Output& out, const torch::Tensor& labels, const train::LossConfig& cfg,
                    double branch_weight = 0);

}  // namespace gait::nets
