#include "gait/nets/losses.hpp"

namespace gait::nets {

namespace F = torch::nn::functional;

torch::Tensor part_distances(const torch::Tensor& embed) {
  const torch::Tensor x = embed.permute({2, 0, 1}).to(torch::kFloat);  // [p, n, c]
  const torch::Tensor x2 = x.pow(2).sum(-1);                            // [p, n]
  const torch::Tensor d2 = x2.unsqueeze(2) + x2.unsqueeze(1) - 2 * x.matmul(x.transpose(1, 2));
  // The epsilon keeps the gradient of sqrt finite on the diagonal (distance 0).
  return (F::relu(d2) + 1e-12).sqrt();
}

torch::Tensor triplet_loss(const torch::Tensor& embed, const torch::Tensor& labels, double margin,
                           train::TripletMining mining, TripletStats* stats) {
  const torch::Tensor d = part_distances(embed);                     // [p, n, n]
  const torch::Tensor same = labels.unsqueeze(1) == labels.unsqueeze(0);  // [n, n]
  const torch::Tensor diff = same.logical_not();
  torch::Tensor loss, active;
  if (mining == train::TripletMining::BatchAll) {
    // terms[p, a, q, k] = d(a, q) - d(a, k) + m, valid where q ~ a and k !~ a.
    const torch::Tensor valid = (same.unsqueeze(2) & diff.unsqueeze(1)).to(torch::kFloat);  // [n, n, n]
    const torch::Tensor terms = F::relu(d.unsqueeze(3) - d.unsqueeze(2) + margin) * valid;
    const torch::Tensor flat = terms.flatten(1);                      // [p, n^3]
    const torch::Tensor nonzero = (flat > 0).sum(1).to(torch::kFloat);
    const torch::Tensor per_part = flat.sum(1) / nonzero.clamp_min(1.0);  // 0 when nothing is active
    loss = per_part.mean();
    active = nonzero.sum() / (valid.sum() * d.size(0)).clamp_min(1.0);
  } else {
    const torch::Tensor far_pos = torch::where(same, d, torch::zeros_like(d)).amax(2);        // [p, n]
    const torch::Tensor near_neg = torch::where(diff, d, torch::full_like(d, 1e9)).amin(2);   // [p, n]
    const torch::Tensor l = F::relu(far_pos - near_neg + margin);
    loss = l.mean();
    active = (l > 0).to(torch::kFloat).mean();
  }
  if (stats) stats->active = active;
  return loss;
}

torch::Tensor part_cross_entropy(const torch::Tensor& logits, const torch::Tensor& labels, double smoothing,
                                 torch::Tensor* accuracy) {
  const int64_t n = logits.size(0), p = logits.size(2);
  const torch::Tensor target = labels.unsqueeze(1).expand({n, p});
  const torch::Tensor l = logits.to(torch::kFloat);
  if (accuracy) *accuracy = (l.argmax(1) == target).to(torch::kFloat).mean();
  return F::cross_entropy(l, target, F::CrossEntropyFuncOptions().label_smoothing(smoothing));
}

torch::Tensor LossTerms::packed() const {
  return torch::stack({total.detach().to(torch::kFloat), triplet, ce, accuracy, active, branches});
}

std::vector<double> LossTerms::unpack(const torch::Tensor& packed) {
  const torch::Tensor host = packed.to(torch::kCPU).contiguous();
  const float* v = host.data_ptr<float>();
  return {v, v + host.numel()};
}

LossTerms gait_loss(const GaitNetImpl::Output& out, const torch::Tensor& labels, const train::LossConfig& cfg,
                    double branch_weight) {
  LossTerms t;
  const auto zero = [&] { return torch::zeros({}, out.embed.options().dtype(torch::kFloat)); };
  t.triplet = t.ce = t.accuracy = t.active = t.branches = zero();
  // One head's weighted triplet + CE; the statistics of the model's own head go to t.
  auto head_loss = [&](const HeadOutput& h, bool record) {
    torch::Tensor total = zero();
    if (cfg.triplet_weight > 0) {
      TripletStats st;
      const torch::Tensor tl = triplet_loss(h.embed, labels, cfg.triplet_margin, cfg.mining, &st);
      total = total + cfg.triplet_weight * tl;
      if (record) {
        t.triplet = tl.detach().to(torch::kFloat);
        t.active = st.active;
      }
    }
    if (cfg.ce_weight > 0) {
      torch::Tensor acc;
      const torch::Tensor ce = part_cross_entropy(h.logits, labels, cfg.label_smoothing, &acc);
      total = total + cfg.ce_weight * ce;
      if (record) {
        t.ce = ce.detach().to(torch::kFloat);
        t.accuracy = acc;
      }
    }
    return total;
  };
  t.total = head_loss(out, true);
  if (branch_weight > 0 && !out.branches.empty()) {
    torch::Tensor branches = torch::zeros_like(t.total);
    for (const HeadOutput& b : out.branches) branches = branches + head_loss(b, false);
    t.branches = branches.detach();
    t.total = t.total + branch_weight * branches;
  }
  return t;
}

}  // namespace gait::nets
