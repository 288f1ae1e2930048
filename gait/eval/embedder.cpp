#include "gait/eval/embedder.hpp"

#include <algorithm>

#include "common/check.hpp"
#include "common/progress.hpp"
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

std::vector<float> Embedder::embed(const CachedSequence& seq) {
  const int64_t t = static_cast<int64_t>(std::min<std::size_t>(seq.sil.frames(), cfg_.evaluator.max_frames));
  XS_ASSERT(t >= 3, "{}: {} frames; at least 3 are needed", sequence_id(seq.key), t);
  torch::NoGradGuard no_grad;
  model_->eval();
  torch::Tensor sil, pose;
  if (model_->uses_silhouettes()) {
    sil = torch::from_blob(const_cast<std::uint8_t*>(seq.sil.pixels.data()), {1, t, kSilHeight, kSilWidth}, torch::kUInt8)
              .to(device_)
              .to(torch::kFloat)
              .div_(255.0);
  }
  if (model_->uses_pose()) {
    XS_ASSERT(!seq.pose.empty(), "{}: the model reads skeletons but the sequence has no pose rows", sequence_id(seq.key));
    static_assert(sizeof(PoseFrame) == sizeof(float) * kCocoJoints * 3, "PoseFrame must be packed floats");
    pose = torch::from_blob(const_cast<PoseFrame*>(seq.pose.data()), {1, t, kCocoJoints, 3}, torch::kFloat).to(device_);
    if (device_.is_cpu()) pose = pose.clone();
  }
  nets::GaitNetImpl::Output out;
  {
    train::AutocastGuard amp(cfg_.trainer.amp && device_.is_cuda());
    out = model_->forward(sil, pose);
  }
  const torch::Tensor f =
      (cfg_.evaluator.feature == train::EvalFeature::BnFeature ? out.bn : out.embed).to(torch::kFloat).cpu().contiguous();
  return std::vector<float>(f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
}

EmbeddingSet Embedder::embed_all(const std::vector<CachedSequence>& seqs, bool progress) {
  EmbeddingSet set;
  set.channels = channels();
  set.parts = parts();
  common::ProgressBar bar("embed", seqs.size(), progress);
  for (const auto& s : seqs) {
    set.add(s.key, embed(s));
    bar.tick();
  }
  bar.finish();
  return set;
}

}  // namespace gait::eval
