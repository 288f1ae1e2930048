#include "gait/nets/gcn_branch.hpp"

#include <fmt/ranges.h>

#include <algorithm>

#include "common/check.hpp"
#include "gait/nets/graph.hpp"
#include "gait/pose.hpp"

namespace gait::nets {

namespace F = torch::nn::functional;

torch::Tensor parent_index(torch::Device device) {
  const auto& g = coco_graph();
  std::vector<int64_t> parent(g.parent.begin(), g.parent.end());
  return torch::tensor(parent, torch::kLong).to(device);
}

torch::Tensor skeleton_inputs(const torch::Tensor& pose) { return skeleton_inputs(pose, parent_index(pose.device())); }

torch::Tensor skeleton_inputs(const torch::Tensor& pose, const torch::Tensor& pidx) {
  XS_ASSERT(pose.dim() == 4 && pose.size(2) == kJoints && pose.size(3) == 3,
            "GCN branch: expected poses [n, s, 17, 3], got {}", fmt::join(pose.sizes(), "x"));
  const torch::Tensor p = pose.to(torch::kFloat);
  const int64_t n = p.size(0), s = p.size(1);
  const torch::Tensor x = p.select(3, 0), y = p.select(3, 1), c = p.select(3, 2);  // [n, s, 17]
  const torch::Tensor valid = c > 0;
  const torch::Tensor vf = valid.to(torch::kFloat);
  const torch::Tensor cx = (x.select(2, kLeftHip) + x.select(2, kRightHip)) * 0.5;  // [n, s]
  const torch::Tensor cy = (y.select(2, kLeftHip) + y.select(2, kRightHip)) * 0.5;
  // Body scale: the mean over frames (with any valid joint) of the vertical joint extent.
  constexpr double kFar = 1e9;
  const torch::Tensor ymax = torch::where(valid, y, torch::full_like(y, -kFar)).amax(2);
  const torch::Tensor ymin = torch::where(valid, y, torch::full_like(y, kFar)).amin(2);
  const torch::Tensor has = valid.any(2).to(torch::kFloat);                           // [n, s]
  const torch::Tensor extent = (ymax - ymin).clamp_min(0) * has;
  const torch::Tensor scale = (extent.sum(1) / has.sum(1).clamp_min(1)).clamp_min(1.0).view({n, 1, 1});
  const torch::Tensor xn = (x - cx.unsqueeze(2)) / scale * vf, yn = (y - cy.unsqueeze(2)) / scale * vf;
  const torch::Tensor joints = torch::stack({xn, yn, c}, 1);  // [n, 3, s, 17]
  torch::Tensor vel;
  if (s > 1) {
    torch::Tensor d = joints.narrow(1, 0, 2).diff(1, 2);        // [n, 2, s-1, 17]
    d = torch::cat({d, d.narrow(2, s - 2, 1)}, 2);
    vel = torch::cat({d, c.unsqueeze(1)}, 1);
  } else {
    vel = torch::cat({torch::zeros_like(joints.narrow(1, 0, 2)), c.unsqueeze(1)}, 1);
  }
  const torch::Tensor xy = joints.narrow(1, 0, 2);
  const torch::Tensor bones = torch::cat({xy - xy.index_select(3, pidx), c.unsqueeze(1)}, 1);
  return torch::cat({joints, vel, bones}, 1);  // [n, 9, s, 17]
}

torch::Tensor natural_operator(int scales) {
  std::vector<float> a = k_hop_operators(coco_graph(), scales);
  return torch::from_blob(a.data(), {scales, kJoints, kJoints}, torch::kFloat).clone();
}

// ------------------------------------------------------------------------- GraphConv

GraphConvImpl::GraphConvImpl(int in, int out, int scales, train::GraphOperator op)
    : scales_(scales), learnable_(op == train::GraphOperator::FullyConnected) {
  if (learnable_) a_ = register_parameter("op", natural_operator(scales));
  else a_ = register_buffer("op", natural_operator(scales));
  mix_ = register_module("mix", torch::nn::Conv2d(torch::nn::Conv2dOptions(in * scales, out, 1).bias(false)));
  bn_ = register_module("bn", torch::nn::BatchNorm2d(out));
}

torch::Tensor GraphConvImpl::forward(const torch::Tensor& x) {
  const int64_t n = x.size(0), c = x.size(1), t = x.size(2), v = x.size(3);
  // One product with the merged operator: y[n, k, c, t, w] = sum_v x[n, c, t, v] A[k, v, w].
  torch::Tensor y = torch::einsum("nctv,kvw->nkctw", {x, a_.to(x.dtype())});
  y = y.reshape({n, scales_ * c, t, v});
  return bn_->forward(mix_->forward(y));
}

// ------------------------------------------------------------------------- STC-Att

StcAttentionImpl::StcAttentionImpl(int channels, int reduction) {
  const int cr = std::max(1, channels / reduction);
  squeeze_ = register_module("squeeze", torch::nn::Conv1d(torch::nn::Conv1dOptions(channels, cr, 1).bias(false)));
  bn_ = register_module("bn", torch::nn::BatchNorm1d(cr));
  to_t_ = register_module("to_t", torch::nn::Conv1d(torch::nn::Conv1dOptions(cr, channels, 1)));
  to_v_ = register_module("to_v", torch::nn::Conv1d(torch::nn::Conv1dOptions(cr, channels, 1)));
  to_c_ = register_module("to_c", torch::nn::Linear(cr, channels));
}

StcAttentionImpl::Gates StcAttentionImpl::gates(const torch::Tensor& x) {
  const int64_t t = x.size(2), v = x.size(3);
  const torch::Tensor desc = torch::cat({x.mean(3), x.mean(2)}, 2);              // [n, C, T + V]
  const torch::Tensor z = torch::relu(bn_->forward(squeeze_->forward(desc)));     // [n, C/r, T + V]
  Gates g;
  g.t = torch::sigmoid(to_t_->forward(z.narrow(2, 0, t))).unsqueeze(3);          // [n, C, T, 1]
  g.v = torch::sigmoid(to_v_->forward(z.narrow(2, t, v))).unsqueeze(2);          // [n, C, 1, V]
  g.c = torch::sigmoid(to_c_->forward(z.mean(2))).unsqueeze(2).unsqueeze(3);     // [n, C, 1, 1]
  return g;
}

torch::Tensor StcAttentionImpl::forward(const torch::Tensor& x) {
  // Residual gating: x (1 + a_t a_v a_c). A bare product of three sigmoids starts near 1/8
  // and shrinks every block's output before the residual sum; with the identity kept the
  // attention re-weights (1x to 2x) and cannot switch a joint, frame or channel off.
  const Gates g = gates(x);
  return x * (1.0 + g.t * g.v * g.c);
}

// ------------------------------------------------------------------------- block, branch

GcnBlockImpl::GcnBlockImpl(int in, int out, const train::GcnConfig& cfg) {
  gcn_ = register_module("gcn", GraphConv(in, out, cfg.scales, cfg.op));
  const int kt = cfg.temporal_kernel;
  tconv_ = register_module(
      "tconv", torch::nn::Conv2d(torch::nn::Conv2dOptions(out, out, {kt, 1}).padding({kt / 2, 0}).bias(false)));
  tbn_ = register_module("tbn", torch::nn::BatchNorm2d(out));
  if (cfg.stc_att) att_ = register_module("att", StcAttention(out, cfg.att_reduction));
  if (in != out) {
    res_ = register_module("res", torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 1).bias(false)));
    res_bn_ = register_module("res_bn", torch::nn::BatchNorm2d(out));
  }
}

torch::Tensor GcnBlockImpl::forward(const torch::Tensor& x) {
  torch::Tensor y = torch::relu(gcn_->forward(x));
  y = tbn_->forward(tconv_->forward(y));
  if (!att_.is_empty()) y = att_->forward(y);
  const torch::Tensor r = res_.is_empty() ? x : res_bn_->forward(res_->forward(x));
  return torch::relu(y + r);
}

GcnBranchImpl::GcnBranchImpl(const train::GcnConfig& cfg) : channels_(cfg.channels.back()) {
  data_bn_ = register_module("data_bn", torch::nn::BatchNorm1d(kSkeletonChannels * kJoints));
  blocks_ = register_module("blocks", torch::nn::ModuleList());
  int in = kSkeletonChannels;
  for (int out : cfg.channels) {
    blocks_->push_back(GcnBlock(in, out, cfg));
    in = out;
  }
}

torch::Tensor GcnBranchImpl::forward(const torch::Tensor& pose) {
  if (!parent_index_.defined() || parent_index_.device() != pose.device()) parent_index_ = parent_index(pose.device());
  torch::Tensor x = skeleton_inputs(pose, parent_index_);  // [n, 9, s, 17]
  const int64_t n = x.size(0), c = x.size(1), s = x.size(2), v = x.size(3);
  x = data_bn_->forward(x.permute({0, 1, 3, 2}).reshape({n, c * v, s}));  // BN over the 9 x 17 inputs
  x = x.view({n, c, v, s}).permute({0, 1, 3, 2}).contiguous();            // [n, 9, s, 17]
  for (const auto& block : *blocks_) x = block->as<GcnBlock>()->forward(x);
  return x.mean({2, 3}).unsqueeze(2);  // [n, c_last, 1]
}

}  // namespace gait::nets
