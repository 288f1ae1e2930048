// The silhouette branch, after GaitGL (Lin et al., ICCV 2021; OpenGait's GaitGL for
// CASIA-B). Widths c0, c1, c2 = model.cnn.channels; n sequences of s frames:
//
//   sil                    [n, s, 64, 44]
//   unsqueeze              [n, 1, s, 64, 44]
//   conv3d 3x3x3 + lrelu   [n, c0, s, 64, 44]
//   LTA conv (3,1,1)/3     [n, c0, s/3, 64, 44]     local temporal aggregation
//   GLConv A0              [n, c1, s/3, 64, 44]     global + local (2^halving strips) 3D convs, summed
//   max-pool (1,2,2)       [n, c1, s/3, 32, 22]
//   GLConv A1              [n, c2, s/3, 32, 22]
//   GLConv B2 (concat)     [n, c2, s/3, 64, 22]     global and local maps stacked along the height
//   temporal max           [n, c2, 64, 22]
//   GeM HPP, p parts       [n, c2, p]               GeM (p = 6.5, learnable) over each horizontal strip
//
// All 3D convs are bias-free and followed by leaky ReLU (slope 0.01), as in GaitGL.
#pragma once

#include "gait/nets/torch.hpp"
#include "gait/train/config.hpp"

namespace gait::nets {

// GaitGL's GLConv: [n, c_in, s, h, w] -> [n, c_out, s, h, w] (sum) or [n, c_out, s, 2h, w] (concat).
// The local conv runs on 2^halving horizontal strips separately (zero padding at each
// strip's border), so local features never mix strips.
class GLConvImpl : public torch::nn::Module {
 public:
  GLConvImpl(int in, int out, int halving, bool concat);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  int halving_;
  bool concat_;
  torch::nn::Conv3d global_{nullptr}, local_{nullptr};
};
TORCH_MODULE(GLConv);

// Generalised-mean horizontal pyramid pooling: [n, c, h, w] -> [n, c, parts].
class GeMHPPImpl : public torch::nn::Module {
 public:
  explicit GeMHPPImpl(int parts, double p = 6.5, double eps = 1e-6);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  int parts_;
  double eps_;
  torch::Tensor p_;
};
TORCH_MODULE(GeMHPP);

class CnnBranchImpl : public torch::nn::Module {
 public:
  explicit CnnBranchImpl(const train::CnnConfig& cfg);
  torch::Tensor forward(const torch::Tensor& sil);  // [n, s, 64, 44] -> [n, c2, parts]
  int channels() const { return channels_; }
  int parts() const { return parts_; }

 private:
  int channels_, parts_;
  torch::nn::Conv3d conv0_{nullptr}, lta_{nullptr};
  GLConv a0_{nullptr}, a1_{nullptr}, b2_{nullptr};
  GeMHPP hpp_{nullptr};
};
TORCH_MODULE(CnnBranch);

}  // namespace gait::nets
