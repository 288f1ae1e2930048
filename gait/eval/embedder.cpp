#include "gait/eval/embedder.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>

#include "common/check.hpp"
#include "common/progress.hpp"
#include "common/validate.hpp"
#include "gait/preprocess.hpp"
#include "gait/train/amp.hpp"

namespace gait::eval {

Embedder::Embedder(const std::filesystem::path& checkpoint, torch::Device device) : device_(device) {
  meta_ = train::read_checkpoint_meta(checkpoint);
  cfg_ = train::parse_config(meta_.config, checkpoint.string() + " (stored config)");
  model_ = nets::GaitNet(cfg_.model, static_cast<int>(meta_.classes.size()));
  train::load_checkpoint(checkpoint, *model_, nullptr, device_);
  model_->to(device_);
  model_->eval();
}

Embedder::Embedder(nets::GaitNet model, train::Config cfg, torch::Device device)
    : cfg_(std::move(cfg)), device_(device), model_(std::move(model)) {
  model_->to(device_);
  model_->eval();
}

int64_t Embedder::frames_used(const CachedSequence& seq) const {
  auto t = static_cast<int64_t>(std::min<std::size_t>(seq.sil.frames(), cfg_.evaluator.max_frames));
  XS_ASSERT(t >= 3, "{}: {} frames; at least 3 are needed", sequence_id(seq.key), t);
  // The first frames, a multiple of length_quantum of them (default 1: all). On CUDA
  // each new input shape costs cuDNN a set-up of every convolution (~0.2 s measured for
  // the two-branch model on an H200); a quantum of 8 turns the test set's ~60 lengths
  // into ~8 at the price of up to 7 frames per sequence.
  const int64_t q = cfg_.evaluator.length_quantum;
  if (t >= q) t -= t % q;
  return t;
}

torch::Tensor Embedder::forward_batch(std::span<const CachedSequence* const> batch, int64_t t) {
  const auto b = static_cast<int64_t>(batch.size());
  torch::NoGradGuard no_grad;
  model_->eval();
  torch::Tensor sil, pose;
  if (model_->uses_silhouettes()) {
    const int64_t frame = int64_t{kSilHeight} * kSilWidth;
    torch::Tensor host = torch::empty({b, t, kSilHeight, kSilWidth}, torch::kUInt8);
    for (int64_t i = 0; i < b; ++i)
      std::memcpy(host.data_ptr<std::uint8_t>() + i * t * frame, batch[i]->sil.pixels.data(), t * frame);
    sil = host.to(device_).to(torch::kFloat).div_(255.0);
  }
  if (model_->uses_pose()) {
    static_assert(sizeof(PoseFrame) == sizeof(float) * kCocoJoints * 3, "PoseFrame must be packed floats");
    pose = torch::empty({b, t, kCocoJoints, 3}, torch::kFloat);
    for (int64_t i = 0; i < b; ++i) {
      XS_ASSERT(batch[i]->pose.size() >= static_cast<std::size_t>(t),
                "{}: the model reads skeletons but the sequence has {} pose rows for {} frames",
                sequence_id(batch[i]->key), batch[i]->pose.size(), t);
      std::memcpy(pose.data_ptr<float>() + i * t * kCocoJoints * 3, batch[i]->pose.data(), t * sizeof(PoseFrame));
    }
    pose = pose.to(device_);
  }
  const train::EvalHeads heads = cfg_.evaluator.heads;
  nets::GaitNetImpl::Output out;
  {
    train::AutocastGuard amp(cfg_.trainer.amp && device_.is_cuda());
    out = model_->forward(sil, pose, nets::FusionDrop::none, heads != train::EvalHeads::Fused);
  }
  const bool bn = cfg_.evaluator.feature == train::EvalFeature::BnFeature;
  auto pick = [&](const nets::HeadOutput& h) { return (bn ? h.bn : h.embed).to(torch::kFloat); };  // [b, d, parts]
  // The skeleton head beside others: a times its embedding (evaluator.skeleton_scale), p times.
  auto skeleton_parts = [&] {
    return (pick(out.branches.at(1)) * cfg_.evaluator.skeleton_scale).expand({b, channels(), model_->parts()});
  };
  torch::Tensor f;
  switch (heads) {
    case train::EvalHeads::Fused: f = pick(out); break;
    case train::EvalHeads::SilhouetteHead: f = pick(out.branches.at(0)); break;
    case train::EvalHeads::SkeletonHead: f = pick(out.branches.at(1)); break;
    case train::EvalHeads::FusedAndBranches: f = torch::cat({pick(out), pick(out.branches.at(0)), skeleton_parts()}, 2); break;
    case train::EvalHeads::Branches: f = torch::cat({pick(out.branches.at(0)), skeleton_parts()}, 2); break;
  }
  return f.reshape({b, -1}).cpu().contiguous();
}

int Embedder::parts() const {
  switch (cfg_.evaluator.heads) {
    case train::EvalHeads::Fused:
    case train::EvalHeads::SilhouetteHead: return model_->parts();
    case train::EvalHeads::SkeletonHead: return 1;
    case train::EvalHeads::FusedAndBranches: return 3 * model_->parts();
    case train::EvalHeads::Branches: return 2 * model_->parts();
  }
  return model_->parts();
}

void Embedder::set_heads(train::EvalHeads heads) {
  XS_ASSERT(heads == train::EvalHeads::Fused || model_->has_branch_heads(),
            "heads '{}' need the branch heads; this model has only the fused head (two_branch with "
            "model.fusion.branch_loss_weight > 0 has them)",
            train::to_string(heads));
  cfg_.evaluator.heads = heads;
}

void Embedder::set_skeleton_scale(double scale) {
  XS_ASSERT(std::isfinite(scale) && scale >= 0, "skeleton scale {} must be finite and >= 0", scale);
  cfg_.evaluator.skeleton_scale = scale;
}

std::vector<float> Embedder::embed(const CachedSequence& seq) {
  const CachedSequence* one[] = {&seq};
  const torch::Tensor f = forward_batch(one, frames_used(seq));
  std::vector<float> out(f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
  common::validate::finite_rows(out, out.size(), "the model's embedding", [&](std::size_t) { return sequence_id(seq.key); });
  return out;
}

EmbeddingSet Embedder::embed_all(const std::vector<CachedSequence>& seqs, bool progress) {
  // Sequences of equal length (after the max_frames cap) go through the model together,
  // up to evaluator.batch_frames frames per pass. In eval mode every layer treats the
  // samples of a batch independently (BatchNorm uses its running statistics; pooling is
  // per sample), so the embeddings equal one-at-a-time ones up to float rounding.
  std::vector<int64_t> len(seqs.size());
  std::vector<std::size_t> order(seqs.size());
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    len[i] = frames_used(seqs[i]);
    order[i] = i;
  }
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return len[a] < len[b]; });
  const std::size_t row = static_cast<std::size_t>(channels()) * parts();
  std::vector<float> rows(seqs.size() * row);
  common::ProgressBar bar("embed", seqs.size(), progress);
  std::vector<const CachedSequence*> batch;
  for (std::size_t at = 0; at < order.size();) {
    const int64_t t = len[order[at]];
    const auto cap = static_cast<std::size_t>(std::max<int64_t>(1, cfg_.evaluator.batch_frames / t));
    std::size_t end = at;
    batch.clear();
    while (end < order.size() && len[order[end]] == t && batch.size() < cap) batch.push_back(&seqs[order[end++]]);
    // On CUDA every pass of one length has the same batch size (the last one padded
    // with copies whose rows are dropped): one input shape per length.
    if (device_.is_cuda())
      while (batch.size() < cap) batch.push_back(batch.back());
    const torch::Tensor f = forward_batch(batch, t);
    XS_ASSERT(static_cast<std::size_t>(f.size(1)) == row && static_cast<std::size_t>(f.size(0)) >= end - at,
              "embedding batch is [{}, {}], expected at least {} rows of {} x {}", f.size(0), f.size(1), end - at,
              channels(), parts());
    for (std::size_t i = at; i < end; ++i)
      std::memcpy(rows.data() + order[i] * row, f.data_ptr<float>() + (i - at) * row, row * sizeof(float));
    bar.tick(end - at);
    at = end;
  }
  bar.finish();
  // A NaN would rank as a distance of nan (first or last, by accident of comparison).
  common::validate::finite_rows(rows, row, "the model's embeddings", [&](std::size_t r) { return sequence_id(seqs[r].key); });
  EmbeddingSet set;
  set.channels = channels();
  set.parts = parts();
  for (std::size_t i = 0; i < seqs.size(); ++i) set.add(seqs[i].key, std::span<const float>(rows.data() + i * row, row));
  return set;
}

}  // namespace gait::eval
