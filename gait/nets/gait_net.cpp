#include "gait/nets/gait_net.hpp"

#include "common/check.hpp"

namespace gait::nets {

SeparateFCsImpl::SeparateFCsImpl(int parts, int in, int out) {
  weight_ = register_parameter("weight", torch::empty({parts, in, out}));
  torch::nn::init::xavier_uniform_(weight_);
}

torch::Tensor SeparateFCsImpl::forward(const torch::Tensor& x) {
  // [n, c_in, p] -> [p, n, c_in] x [p, c_in, c_out] -> [p, n, c_out] -> [n, c_out, p]
  return x.permute({2, 0, 1}).matmul(weight_).permute({1, 2, 0}).contiguous();
}

namespace {

HeadOutput apply_head(SeparateFCs& fc, torch::nn::BatchNorm1d& bnneck, SeparateFCs& classifier, const torch::Tensor& f,
                      int embed_dim, int parts) {
  HeadOutput o;
  o.embed = fc->forward(f);                                    // [n, d, p]
  const int64_t n = o.embed.size(0);
  o.bn = bnneck->forward(o.embed.reshape({n, -1})).view({n, embed_dim, parts});
  o.logits = classifier->forward(o.bn);                        // [n, classes, p]
  return o;
}

}  // namespace

HeadImpl::HeadImpl(int parts, int in, int embed_dim, int classes) : parts_(parts), embed_dim_(embed_dim) {
  fc_ = register_module("fc", SeparateFCs(parts, in, embed_dim));
  bnneck_ = register_module("bnneck", torch::nn::BatchNorm1d(embed_dim * parts));
  classifier_ = register_module("classifier", SeparateFCs(parts, embed_dim, classes));
}

HeadOutput HeadImpl::forward(const torch::Tensor& f) {
  return apply_head(fc_, bnneck_, classifier_, f, embed_dim_, parts_);
}

GaitNetImpl::GaitNetImpl(const train::ModelConfig& cfg, int num_classes)
    : embed_dim_(cfg.fusion.embed_dim), classes_(num_classes) {
  XS_ASSERT(num_classes >= 2, "the classifier needs at least 2 training identities, got {}", num_classes);
  int in = 0;
  if (cfg.mode != train::ModelMode::Skeleton) {
    cnn_ = register_module("cnn", CnnBranch(cfg.cnn));
    parts_ = cnn_->parts();
    in += cnn_->channels();
  }
  if (cfg.mode != train::ModelMode::Silhouette) {
    gcn_ = register_module("gcn", GcnBranch(cfg.gcn));
    in += gcn_->channels();
  }
  fc_ = register_module("fc", SeparateFCs(parts_, in, embed_dim_));
  bnneck_ = register_module("bnneck", torch::nn::BatchNorm1d(embed_dim_ * parts_));
  classifier_ = register_module("classifier", SeparateFCs(parts_, embed_dim_, num_classes));
  if (cfg.mode == train::ModelMode::TwoBranch && cfg.fusion.branch_loss_weight > 0) {
    sil_head_ = register_module("sil_head", Head(parts_, cnn_->channels(), embed_dim_, num_classes));
    skel_head_ = register_module("skel_head", Head(1, gcn_->channels(), embed_dim_, num_classes));
  }
}

GaitNetImpl::Output GaitNetImpl::forward(const torch::Tensor& sil, const torch::Tensor& pose, FusionDrop drop,
                                         bool with_branches) {
  torch::Tensor s, g;
  if (uses_silhouettes()) {
    XS_ASSERT(sil.defined(), "this model reads silhouettes but none were given");
    s = cnn_->forward(sil);                                    // [n, c_s, p]
  }
  if (uses_pose()) {
    XS_ASSERT(pose.defined() && pose.numel() > 0, "this model reads skeletons but the data has no pose");
    g = gcn_->forward(pose);                                   // [n, c_g, 1]
  }
  const bool fused = s.defined() && g.defined();
  XS_ASSERT(drop == FusionDrop::none || (fused && is_training()),
            "modality dropout applies to the two-branch model in training only");
  torch::Tensor f;
  if (fused) {
    const torch::Tensor sf = drop == FusionDrop::silhouette ? torch::zeros_like(s) : s;
    const torch::Tensor gf = drop == FusionDrop::skeleton ? torch::zeros_like(g) : g;
    f = torch::cat({sf, gf.expand({g.size(0), g.size(1), parts_}).to(s.dtype())}, 1);  // [n, c_s + c_g, p]
  } else {
    f = s.defined() ? s : g;
  }
  Output o;
  static_cast<HeadOutput&>(o) = apply_head(fc_, bnneck_, classifier_, f, embed_dim_, parts_);
  XS_ASSERT(!with_branches || has_branch_heads(), "this model has no branch heads (two_branch with branch_loss_weight > 0)");
  if (has_branch_heads() && (is_training() || with_branches))
    o.branches = {sil_head_->forward(s), skel_head_->forward(g)};
  return o;
}

}  // namespace gait::nets
