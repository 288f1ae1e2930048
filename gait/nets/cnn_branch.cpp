#include "gait/nets/cnn_branch.hpp"

#include "common/check.hpp"

namespace gait::nets {

namespace F = torch::nn::functional;

namespace {
torch::nn::Conv3d conv3(int in, int out) {
  return torch::nn::Conv3d(torch::nn::Conv3dOptions(in, out, 3).stride(1).padding(1).bias(false));
}
torch::Tensor lrelu(const torch::Tensor& x) { return F::leaky_relu(x, F::LeakyReLUFuncOptions().negative_slope(0.01)); }
}  // namespace

GLConvImpl::GLConvImpl(int in, int out, int halving, bool concat) : halving_(halving), concat_(concat) {
  global_ = register_module("global_conv", conv3(in, out));
  local_ = register_module("local_conv", conv3(in, out));
}

torch::Tensor GLConvImpl::forward(const torch::Tensor& x) {
  const torch::Tensor g = global_->forward(x);
  torch::Tensor l;
  if (halving_ == 0) {
    l = local_->forward(x);
  } else {
    // Fold the strips into the batch: [n, c, s, k*hs, w] -> [n*k, c, s, hs, w], one conv, unfold.
    const int64_t n = x.size(0), c = x.size(1), s = x.size(2), h = x.size(3), w = x.size(4);
    const int64_t k = int64_t{1} << halving_;
    XS_ASSERT(h % k == 0, "GLConv: height {} is not divisible into {} strips", h, k);
    const int64_t hs = h / k;
    torch::Tensor strips = x.view({n, c, s, k, hs, w}).permute({0, 3, 1, 2, 4, 5}).reshape({n * k, c, s, hs, w});
    torch::Tensor y = local_->forward(strips);
    const int64_t co = y.size(1);
    l = y.view({n, k, co, s, hs, w}).permute({0, 2, 3, 1, 4, 5}).reshape({n, co, s, h, w});
  }
  if (concat_) return lrelu(torch::cat({g, l}, 3));
  return lrelu(g) + lrelu(l);
}

GeMHPPImpl::GeMHPPImpl(int parts, double p, double eps) : parts_(parts), eps_(eps) {
  p_ = register_parameter("p", torch::full({1}, p));
}

torch::Tensor GeMHPPImpl::forward(const torch::Tensor& x) {
  const int64_t n = x.size(0), c = x.size(1);
  XS_ASSERT(x.size(2) % parts_ == 0, "GeM HPP: height {} is not divisible into {} parts", x.size(2), parts_);
  torch::Tensor z = x.reshape({n, c, parts_, -1});
  return z.clamp_min(eps_).pow(p_).mean(-1).pow(p_.reciprocal());
}

CnnBranchImpl::CnnBranchImpl(const train::CnnConfig& cfg) : channels_(cfg.channels.at(2)), parts_(cfg.parts) {
  const int c0 = cfg.channels.at(0), c1 = cfg.channels.at(1), c2 = cfg.channels.at(2);
  conv0_ = register_module("conv0", conv3(1, c0));
  lta_ = register_module(
      "lta", torch::nn::Conv3d(torch::nn::Conv3dOptions(c0, c0, {3, 1, 1}).stride({3, 1, 1}).padding(0).bias(false)));
  a0_ = register_module("a0", GLConv(c0, c1, cfg.halving, false));
  a1_ = register_module("a1", GLConv(c1, c2, cfg.halving, false));
  b2_ = register_module("b2", GLConv(c2, c2, cfg.halving, true));
  hpp_ = register_module("hpp", GeMHPP(cfg.parts));
}

torch::Tensor CnnBranchImpl::forward(const torch::Tensor& sil) {
  XS_ASSERT(sil.dim() == 4, "CNN branch: expected silhouettes [n, s, 64, 44], got {} dims", sil.dim());
  XS_ASSERT(sil.size(1) >= 3, "CNN branch: a clip needs at least 3 frames, got {}", sil.size(1));
  torch::Tensor x = sil.unsqueeze(1);                  // [n, 1, s, 64, 44]
  x = lrelu(conv0_->forward(x));                       // [n, c0, s, 64, 44]
  x = lrelu(lta_->forward(x));                         // [n, c0, s/3, 64, 44]
  x = a0_->forward(x);                                 // [n, c1, s/3, 64, 44]
  x = F::max_pool3d(x, F::MaxPool3dFuncOptions({1, 2, 2}).stride({1, 2, 2}));  // [n, c1, s/3, 32, 22]
  x = a1_->forward(x);                                 // [n, c2, s/3, 32, 22]
  x = b2_->forward(x);                                 // [n, c2, s/3, 64, 22]
  x = std::get<0>(x.max(2));                           // [n, c2, 64, 22]
  return hpp_->forward(x);                             // [n, c2, p]
}

}  // namespace gait::nets
