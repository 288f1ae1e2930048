// LibTorch modules: shapes, the fully connected graph convolution's initialisation,
// STC-Att, the losses against host references.
#include <gtest/gtest.h>

#include <cmath>

#include "common/check.hpp"
#include "gait/nets/gait_net.hpp"
#include "gait/nets/graph.hpp"
#include "gait/nets/losses.hpp"
#include "gait/pose.hpp"

namespace gait::nets {
namespace {

namespace F = torch::nn::functional;

train::ModelConfig tiny_model(train::ModelMode mode) {
  train::ModelConfig m;
  m.mode = mode;
  m.cnn.channels = {2, 4, 4};
  m.cnn.halving = 2;
  m.cnn.parts = 8;
  m.gcn.channels = {4, 6};
  m.gcn.scales = 3;
  m.fusion.embed_dim = 5;
  return m;
}

torch::Tensor random_pose(int n, int s) {
  torch::Tensor p = torch::rand({n, s, 17, 3});
  p.select(3, 0).mul_(100).add_(100);  // x in [100, 200]
  p.select(3, 1).mul_(150).add_(40);   // y in [40, 190]
  p.select(3, 2).mul_(0.5).add_(0.5);  // conf in [0.5, 1]
  return p;
}

TEST(CnnBranch, Shapes) {
  torch::manual_seed(0);
  train::CnnConfig c;
  c.channels = {3, 5, 7};
  c.halving = 3;
  c.parts = 16;
  CnnBranch net(c);
  const torch::Tensor y = net->forward(torch::rand({2, 9, 64, 44}));
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{2, 7, 16}));
  EXPECT_TRUE(torch::isfinite(y).all().item<bool>());
  EXPECT_EQ(net->channels(), 7);
}

TEST(CnnBranch, LocalConvSeesEachStripAlone) {
  // GLConv(halving 2): the local path equals a conv over each of the 4 strips separately.
  torch::manual_seed(1);
  GLConv g(2, 3, 2, /*concat=*/true);
  const torch::Tensor x = torch::randn({1, 2, 3, 8, 5});
  const torch::Tensor y = g->forward(x);  // concat along height: [1, 3, 3, 16, 5]
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{1, 3, 3, 16, 5}));
  torch::Tensor w_local;
  for (const auto& p : g->named_parameters())
    if (p.key() == "local_conv.weight") w_local = p.value();
  ASSERT_TRUE(w_local.defined());
  std::vector<torch::Tensor> parts;
  for (const auto& strip : x.split(2, 3)) parts.push_back(F::conv3d(strip, w_local, F::Conv3dFuncOptions().padding(1)));
  const torch::Tensor ref = F::leaky_relu(torch::cat(parts, 3), F::LeakyReLUFuncOptions().negative_slope(0.01));
  EXPECT_TRUE(torch::allclose(y.narrow(3, 8, 8), ref, 1e-5, 1e-6));
}

TEST(GcnBranch, InputsAreTranslationAndScaleInvariant) {
  torch::manual_seed(2);
  const torch::Tensor p = random_pose(2, 6);
  const torch::Tensor f = skeleton_inputs(p);
  EXPECT_EQ(f.sizes(), (std::vector<int64_t>{2, kSkeletonChannels, 6, 17}));
  torch::Tensor q = p.clone();
  q.select(3, 0).mul_(2).add_(30);
  q.select(3, 1).mul_(2).add_(-7);
  EXPECT_TRUE(torch::allclose(skeleton_inputs(q), f, 1e-4, 1e-5));
  // Joints are centred on the mid-hip: its normalised coordinates are 0.
  const torch::Tensor mid = (f.select(3, gait::kLeftHip) + f.select(3, gait::kRightHip)).narrow(1, 0, 2);
  EXPECT_LT(mid.abs().max().item<float>(), 1e-5);
}

TEST(GcnBranch, Shapes) {
  torch::manual_seed(3);
  train::GcnConfig c;
  c.channels = {8, 8, 12};
  GcnBranch net(c);
  const torch::Tensor y = net->forward(random_pose(3, 10));
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{3, 12, 1}));
  EXPECT_EQ(net->channels(), 12);
}

TEST(GraphConv, FullyConnectedStartsAsTheMergedKHopNaturalOperator) {
  torch::manual_seed(4);
  GraphConv fc(4, 6, 3, train::GraphOperator::FullyConnected);
  GraphConv nat(4, 6, 3, train::GraphOperator::Natural);
  // The operator tensors: equal to each other and to the closed-form k-hop operators.
  const std::vector<float> ref = k_hop_operators(coco_graph(), 3);
  const torch::Tensor r = torch::from_blob(const_cast<float*>(ref.data()), {3, 17, 17}, torch::kFloat);
  EXPECT_TRUE(torch::equal(fc->op(), r));
  EXPECT_TRUE(torch::equal(nat->op(), r));
  EXPECT_TRUE(fc->op().requires_grad());
  EXPECT_TRUE(fc->learnable());
  EXPECT_FALSE(nat->learnable());
  for (const auto& p : nat->named_parameters()) EXPECT_NE(p.key(), "op");  // a fixed buffer
  // Same weights -> the same output: at initialisation the FC layer is the natural one.
  {
    torch::NoGradGuard ng;
    for (const auto& p : nat->named_parameters()) fc->named_parameters()[p.key()].copy_(p.value());
  }
  const torch::Tensor x = torch::randn({2, 4, 5, 17});
  EXPECT_TRUE(torch::allclose(fc->forward(x), nat->forward(x), 1e-5, 1e-6));
  // The FC operator is free to link joints the skeleton does not: after one step the
  // entry between joints 6 hops apart (zero in every scale) has moved.
  EXPECT_EQ(fc->op()[1][gait::kLeftWrist][gait::kRightWrist].item<float>(), 0.0f);
  torch::optim::SGD opt(fc->parameters(), torch::optim::SGDOptions(0.1));
  const torch::Tensor target = torch::randn({2, 6, 5, 17});
  F::mse_loss(fc->forward(x), target).backward();
  opt.step();
  EXPECT_NE(fc->op()[1][gait::kLeftWrist][gait::kRightWrist].item<float>(), 0.0f);
}

TEST(StcAttention, ShapeAndPositiveGates) {
  torch::manual_seed(5);
  StcAttention att(8, 4);
  const torch::Tensor x = torch::randn({2, 8, 7, 17});
  const torch::Tensor y = att->forward(x);
  EXPECT_EQ(y.sizes(), x.sizes());
  const auto g = att->gates(x);
  EXPECT_EQ(g.t.sizes(), (std::vector<int64_t>{2, 8, 7, 1}));
  EXPECT_EQ(g.v.sizes(), (std::vector<int64_t>{2, 8, 1, 17}));
  EXPECT_EQ(g.c.sizes(), (std::vector<int64_t>{2, 8, 1, 1}));
  for (const auto& a : {g.t, g.v, g.c}) {
    EXPECT_GT(a.min().item<float>(), 0.0f);
    EXPECT_LT(a.max().item<float>(), 1.0f);
  }
  // Applied multiplicatively as x (1 + a_t a_v a_c) with gates in (0, 1): same signs,
  // magnitudes between |x| and 2|x|.
  EXPECT_TRUE(torch::equal(torch::sign(y), torch::sign(x)));
  EXPECT_TRUE((y.abs() >= x.abs()).all().item<bool>());
  EXPECT_TRUE((y.abs() <= 2 * x.abs()).all().item<bool>());
  EXPECT_TRUE(torch::allclose(y, x + x * g.t * g.v * g.c));
  // The gates depend on the frame and the joint (attention, not a constant).
  EXPECT_GT(g.t.std().item<float>(), 0.0f);
  EXPECT_GT(g.v.std().item<float>(), 0.0f);
}

TEST(GaitNet, ShapesPerMode) {
  torch::manual_seed(6);
  const torch::Tensor sil = torch::rand({4, 6, 64, 44}), pose = random_pose(4, 6);
  struct Case {
    train::ModelMode mode;
    int64_t parts;
  };
  for (const Case c : {Case{train::ModelMode::TwoBranch, 8}, Case{train::ModelMode::Silhouette, 8},
                       Case{train::ModelMode::Skeleton, 1}}) {
    GaitNet net(tiny_model(c.mode), 7);
    const auto out = net->forward(sil, pose);
    EXPECT_EQ(out.embed.sizes(), (std::vector<int64_t>{4, 5, c.parts})) << train::to_string(c.mode);
    EXPECT_EQ(out.bn.sizes(), (std::vector<int64_t>{4, 5, c.parts}));
    EXPECT_EQ(out.logits.sizes(), (std::vector<int64_t>{4, 7, c.parts}));
    EXPECT_EQ(net->uses_silhouettes(), c.mode != train::ModelMode::Skeleton);
    EXPECT_EQ(net->uses_pose(), c.mode != train::ModelMode::Silhouette);
  }
  GaitNet sil_only(tiny_model(train::ModelMode::Silhouette), 7);
  EXPECT_NO_THROW(sil_only->forward(sil, torch::Tensor()));
}

// two_branch extras: branch heads (training only) and modality dropout of the fused input.
TEST(GaitNet, BranchHeadsAndModalityDropout) {
  torch::manual_seed(8);
  const torch::Tensor sil = torch::rand({4, 6, 64, 44}), pose = random_pose(4, 6);
  train::ModelConfig cfg = tiny_model(train::ModelMode::TwoBranch);
  GaitNet plain(cfg, 7);
  EXPECT_TRUE(plain->forward(sil, pose).branches.empty());  // weight 0: no branch heads
  cfg.fusion.branch_loss_weight = 0.5;
  GaitNet net(cfg, 7);
  net->train();
  const auto out = net->forward(sil, pose);
  ASSERT_EQ(out.branches.size(), 2u);
  EXPECT_EQ(out.branches[0].embed.sizes(), (std::vector<int64_t>{4, 5, 8}));  // silhouette: CNN parts
  EXPECT_EQ(out.branches[1].embed.sizes(), (std::vector<int64_t>{4, 5, 1}));  // skeleton: one part
  EXPECT_EQ(out.branches[1].logits.sizes(), (std::vector<int64_t>{4, 7, 1}));
  // Branch drop: the fused embedding no longer depends on the dropped branch's input,
  // and still does on the other's.
  const torch::Tensor sil2 = torch::rand({4, 6, 64, 44}), pose2 = random_pose(4, 6);
  torch::NoGradGuard ng;
  net->train();
  // In training mode BatchNorm uses batch statistics, but the embed (before the BNNeck)
  // is a plain function of the fused input.
  const auto no_skel_a = net->forward(sil, pose, FusionDrop::skeleton).embed;
  const auto no_skel_b = net->forward(sil, pose2, FusionDrop::skeleton).embed;
  EXPECT_TRUE(torch::allclose(no_skel_a, no_skel_b));
  EXPECT_FALSE(torch::allclose(net->forward(sil2, pose, FusionDrop::skeleton).embed, no_skel_a));
  const auto no_sil_a = net->forward(sil, pose, FusionDrop::silhouette).embed;
  EXPECT_TRUE(torch::allclose(no_sil_a, net->forward(sil2, pose, FusionDrop::silhouette).embed));
  EXPECT_FALSE(torch::allclose(no_sil_a, net->forward(sil, pose2, FusionDrop::silhouette).embed));
  // Branch heads still see their own branch when it is dropped from the fusion.
  const auto d = net->forward(sil, pose, FusionDrop::silhouette);
  EXPECT_TRUE(torch::allclose(d.branches[0].embed, out.branches[0].embed));
  // Evaluation: no branch heads, no dropping.
  net->eval();
  EXPECT_TRUE(net->forward(sil, pose).branches.empty());
  EXPECT_THROW(net->forward(sil, pose, FusionDrop::skeleton), common::Error);
  // ...unless asked for (evaluator.heads): the branch heads' embeddings in eval mode.
  const auto ev = net->forward(sil, pose, FusionDrop::none, /*with_branches=*/true);
  ASSERT_EQ(ev.branches.size(), 2u);
  EXPECT_EQ(ev.branches[1].bn.sizes(), (std::vector<int64_t>{4, 5, 1}));
  EXPECT_TRUE(torch::allclose(ev.embed, net->forward(sil, pose).embed));
  plain->eval();
  EXPECT_THROW(plain->forward(sil, pose, FusionDrop::none, true), common::Error);
}

TEST(Losses, BranchHeadsAddTheirWeightedLosses) {
  torch::manual_seed(9);
  train::ModelConfig cfg = tiny_model(train::ModelMode::TwoBranch);
  cfg.fusion.branch_loss_weight = 0.25;
  GaitNet net(cfg, 3);
  net->train();
  const auto out = net->forward(torch::rand({6, 6, 64, 44}), random_pose(6, 6));
  const torch::Tensor y = torch::tensor({0, 0, 1, 1, 2, 2}, torch::kLong);
  const train::LossConfig lc;
  const LossTerms fused_only = gait_loss(out, y, lc);
  const LossTerms with = gait_loss(out, y, lc, cfg.fusion.branch_loss_weight);
  double branches = 0;
  for (const auto& b : out.branches)
    branches += (lc.triplet_weight * triplet_loss(b.embed, y, lc.triplet_margin, lc.mining) +
                 lc.ce_weight * part_cross_entropy(b.logits, y, lc.label_smoothing))
                    .item<double>();
  EXPECT_GT(branches, 0.0);
  EXPECT_NEAR(with.branches.item<double>(), branches, 1e-5);
  EXPECT_NEAR(with.total.item<double>(), fused_only.total.item<double>() + 0.25 * branches, 1e-4);
  EXPECT_DOUBLE_EQ(with.triplet.item<double>(), fused_only.triplet.item<double>());  // the logged terms: fused head's
  EXPECT_EQ(fused_only.branches.item<double>(), 0.0);
  // read(): the same figures in one copy, in its documented order.
  const std::vector<double> r = with.read();
  ASSERT_EQ(r.size(), 6u);
  EXPECT_NEAR(r[0], with.total.item<double>(), 1e-6);
  EXPECT_NEAR(r[1], with.triplet.item<double>(), 1e-6);
  EXPECT_NEAR(r[2], with.ce.item<double>(), 1e-6);
  EXPECT_NEAR(r[3], with.accuracy.item<double>(), 1e-6);
  EXPECT_NEAR(r[4], with.active.item<double>(), 1e-6);
  EXPECT_NEAR(r[5], branches, 1e-5);
}

// Host reference for the triplet losses: loops over all (anchor, positive, negative).
double reference_triplet(const torch::Tensor& e, const std::vector<int64_t>& y, double m, bool hard) {
  const int64_t n = e.size(0), c = e.size(1), p = e.size(2);
  auto dist = [&](int64_t part, int64_t a, int64_t b) {
    double s = 0;
    for (int64_t k = 0; k < c; ++k) {
      const double d = e[a][k][part].item<double>() - e[b][k][part].item<double>();
      s += d * d;
    }
    return std::sqrt(s);
  };
  double total = 0;
  for (int64_t part = 0; part < p; ++part) {
    double sum = 0;
    int count = 0;
    for (int64_t a = 0; a < n; ++a) {
      double far = 0, near = 1e30;
      for (int64_t q = 0; q < n; ++q) {
        if (y[q] == y[a]) far = std::max(far, dist(part, a, q));
        else near = std::min(near, dist(part, a, q));
        if (hard || y[q] != y[a]) continue;
        for (int64_t k = 0; k < n; ++k) {
          if (y[k] == y[a]) continue;
          const double l = std::max(0.0, dist(part, a, q) - dist(part, a, k) + m);
          sum += l;
          count += l > 0;
        }
      }
      if (hard) {
        sum += std::max(0.0, far - near + m);
        ++count;
      }
    }
    total += count ? sum / count : 0.0;
  }
  return total / p;
}

TEST(Losses, TripletMatchesHostReference) {
  torch::manual_seed(7);
  const std::vector<int64_t> y = {0, 0, 1, 1, 2, 2};
  const torch::Tensor labels = torch::tensor(y);
  const torch::Tensor e = torch::randn({6, 3, 2}, torch::kDouble).mul(0.3).to(torch::kFloat);
  const double ba = triplet_loss(e, labels, 0.2, train::TripletMining::BatchAll).item<double>();
  const double hd = triplet_loss(e, labels, 0.2, train::TripletMining::Hard).item<double>();
  EXPECT_NEAR(ba, reference_triplet(e, y, 0.2, false), 1e-5);
  EXPECT_NEAR(hd, reference_triplet(e, y, 0.2, true), 1e-5);
  EXPECT_GT(ba, 0.0);
  // Well separated identities give zero loss.
  const torch::Tensor sep = torch::tensor({0.0f, 0.01f, 10.0f, 10.01f, 20.0f, 20.01f}).view({6, 1, 1});
  EXPECT_EQ(triplet_loss(sep, labels, 0.2, train::TripletMining::BatchAll).item<double>(), 0.0);
  EXPECT_EQ(triplet_loss(sep, labels, 0.2, train::TripletMining::Hard).item<double>(), 0.0);
}

TEST(Losses, CrossEntropyOfUniformLogitsIsLogK) {
  const torch::Tensor logits = torch::zeros({4, 5, 3});
  torch::Tensor acc;
  const double ce = part_cross_entropy(logits, torch::tensor({0, 1, 2, 3}, torch::kLong), 0.1, &acc).item<double>();
  EXPECT_NEAR(ce, std::log(5.0), 1e-6);
  torch::Tensor sure = torch::zeros({2, 3, 1});
  sure[0][1][0] = 50;
  sure[1][2][0] = 50;
  EXPECT_LT(part_cross_entropy(sure, torch::tensor({1, 2}, torch::kLong), 0.0, &acc).item<double>(), 1e-6);
  EXPECT_DOUBLE_EQ(acc.item<double>(), 1.0);
}

}  // namespace
}  // namespace gait::nets
