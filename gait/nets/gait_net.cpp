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
}

GaitNetImpl::Output GaitNetImpl::forward(const torch::Tensor& sil, const torch::Tensor& pose) {
  torch::Tensor f;
  if (uses_silhouettes()) {
    XS_ASSERT(sil.defined(), "this model reads silhouettes but none were given");
    f = cnn_->forward(sil);                                    // [n, c_s, p]
  }
  if (uses_pose()) {
    XS_ASSERT(pose.defined() && pose.numel() > 0, "this model reads skeletons but the data has no pose");
    torch::Tensor g = gcn_->forward(pose);                     // [n, c_g, 1]
    if (f.defined()) f = torch::cat({f, g.expand({g.size(0), g.size(1), parts_}).to(f.dtype())}, 1);
    else f = g;
  }
  Output o;
  o.embed = fc_->forward(f);                                   // [n, d, p]
  const int64_t n = o.embed.size(0);
  o.bn = bnneck_->forward(o.embed.reshape({n, -1})).view({n, embed_dim_, parts_});
  o.logits = classifier_->forward(o.bn);                       // [n, classes, p]
  return o;
}

}  // namespace gait::nets
