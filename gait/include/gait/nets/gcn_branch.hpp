// The skeleton branch: a multi-scale graph convolutional network over COCO-17 poses
// with the fully connected graph convolution and STC-Att.
//
// Input features (skeleton_inputs), from pose [n, s, 17, 3] = (x, y, conf) in video pixels:
//   centre    mid-hip of each frame;  scale  the sequence's mean vertical joint extent
//   joints    (x^, y^, c)                      x^ = (x - centre) / scale; 0 for missing joints
//   velocity  (x^_{t+1} - x^_t, y^_{t+1} - y^_t, c)   (the last frame repeats the previous velocity)
//   bones     (x^_j - x^_parent(j), ..., c)    parent on the natural tree (graph.hpp)
//   -> [n, 9, s, 17] (channels, frames, joints), then a BatchNorm over the 9 x 17 inputs.
//
// Block (c_in -> c_out), x [n, c, t, V]:
//   GraphConv:   y = BN(W [x A_0 | x A_1 | ... | x A_{K-1}])   (x A_k: product over joints;
//                W: a 1x1 conv over the K * c_in stacked channels)
//       natural: A = [A_0 .. A_{K-1}] the fixed k-hop operators of the skeleton
//       fc:      A is a learnable dense K x 17 x 17 tensor, initialised to the same k-hop
//                operators: one operator over all joint pairs, free to link any joints
//   ReLU -> TemporalConv: BN(conv (kt x 1)) -> STC-Att (optional) -> + residual -> ReLU
//
// STC-Att (x [n, C, T, V] -> [n, C, T, V]): the temporal and spatial descriptors are
// embedded together, then three gates are read from the joint embedding:
//   z   = ReLU(BN(W_s [mean_V x | mean_T x]))        [n, C/r, T + V]   (one shared 1x1 conv)
//   a_t = sigma(W_t z[:, :, :T])                      [n, C, T, 1]   temporal
//   a_v = sigma(W_v z[:, :, T:])                      [n, C, 1, V]   spatial (joints)
//   a_c = sigma(W_c mean_{T+V} z)                     [n, C, 1, 1]   channel
//   out = x * a_t * a_v * a_c                         (all gates in (0, 1))
//
// Branch: blocks -> mean over frames and joints -> [n, c_last, 1].
#pragma once

#include "gait/nets/torch.hpp"
#include "gait/train/config.hpp"

namespace gait::nets {

inline constexpr int kSkeletonChannels = 9;

torch::Tensor skeleton_inputs(const torch::Tensor& pose);  // [n, s, 17, 3] -> [n, 9, s, 17]
// The same with the natural tree's parent of each joint given as a long tensor [17] on the
// pose's device (the branch keeps one, so its forward pass copies nothing from the host
// and can be captured in a CUDA graph).
torch::Tensor skeleton_inputs(const torch::Tensor& pose, const torch::Tensor& parent_index);
torch::Tensor parent_index(torch::Device device);

// The merged k-hop operator of the natural graph as a tensor [K, 17, 17].
torch::Tensor natural_operator(int scales);

class GraphConvImpl : public torch::nn::Module {
 public:
  GraphConvImpl(int in, int out, int scales, train::GraphOperator op);
  torch::Tensor forward(const torch::Tensor& x);  // [n, c_in, t, 17] -> [n, c_out, t, 17]
  const torch::Tensor& op() const { return a_; }  // [K, 17, 17]
  bool learnable() const { return learnable_; }

 private:
  int scales_;
  bool learnable_;
  torch::Tensor a_;
  torch::nn::Conv2d mix_{nullptr};
  torch::nn::BatchNorm2d bn_{nullptr};
};
TORCH_MODULE(GraphConv);

class StcAttentionImpl : public torch::nn::Module {
 public:
  StcAttentionImpl(int channels, int reduction);
  struct Gates {
    torch::Tensor t, v, c;  // [n, C, T, 1], [n, C, 1, V], [n, C, 1, 1]
  };
  Gates gates(const torch::Tensor& x);
  torch::Tensor forward(const torch::Tensor& x);  // [n, C, T, V] -> [n, C, T, V]

 private:
  torch::nn::Conv1d squeeze_{nullptr}, to_t_{nullptr}, to_v_{nullptr};
  torch::nn::BatchNorm1d bn_{nullptr};
  torch::nn::Linear to_c_{nullptr};
};
TORCH_MODULE(StcAttention);

class GcnBlockImpl : public torch::nn::Module {
 public:
  GcnBlockImpl(int in, int out, const train::GcnConfig& cfg);
  torch::Tensor forward(const torch::Tensor& x);  // [n, c_in, t, 17] -> [n, c_out, t, 17]

 private:
  GraphConv gcn_{nullptr};
  torch::nn::Conv2d tconv_{nullptr};
  torch::nn::BatchNorm2d tbn_{nullptr};
  StcAttention att_{nullptr};
  torch::nn::Conv2d res_{nullptr};
  torch::nn::BatchNorm2d res_bn_{nullptr};
};
TORCH_MODULE(GcnBlock);

class GcnBranchImpl : public torch::nn::Module {
 public:
  explicit GcnBranchImpl(const train::GcnConfig& cfg);
  torch::Tensor forward(const torch::Tensor& pose);  // [n, s, 17, 3] -> [n, c_last, 1]
  int channels() const { return channels_; }

 private:
  int channels_;
  torch::Tensor parent_index_;  // parent_index() on the device of the last forward pass
  torch::nn::BatchNorm1d data_bn_{nullptr};
  torch::nn::ModuleList blocks_;
};
TORCH_MODULE(GcnBranch);

}  // namespace gait::nets
