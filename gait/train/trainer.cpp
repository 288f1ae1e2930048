#include "gait/train/trainer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "common/check.hpp"
#include "common/files.hpp"
#include "common/progress.hpp"
#include "common/stats.hpp"
#include "gait/nets/losses.hpp"
#include "gait/train/adam.hpp"
#include "gait/train/amp.hpp"
#include "gait/train/augment.hpp"
#include "gait/train/checkpoint.hpp"
#include "gait/train/graph_step.hpp"
#include "gait/train/schedule.hpp"

namespace gait::train {

namespace fs = std::filesystem;

namespace {

// Stream tags for derive_seed, so the sampler and the per-step draws never share a stream.
constexpr std::uint64_t kSamplerStream = 0x53414d50;  // "SAMP"
constexpr std::uint64_t kStepStream = 0x53544550;     // "STEP"
constexpr std::uint64_t kFusionStream = 0x46555345;   // "FUSE": modality dropout per step

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerConfig& o, nets::GaitNet& model) {
  auto params = model->parameters();
  if (o.type == OptimizerType::Adam)
    return std::make_unique<MultiTensorAdam>(params, torch::optim::AdamOptions(o.lr).weight_decay(o.weight_decay));
  return std::make_unique<torch::optim::SGD>(
      params, torch::optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.weight_decay).nesterov(o.nesterov));
}

// A host tensor holding v: page-locked when it is bound for a CUDA device (so the copy
// in step() is asynchronous), else a plain copy.
template <class T>
torch::Tensor host_tensor(const std::vector<T>& v, std::vector<int64_t> shape, torch::ScalarType type, bool pinned) {
  torch::Tensor t = torch::empty(shape, torch::TensorOptions().dtype(type).pinned_memory(pinned));
  XS_ASSERT(static_cast<std::size_t>(t.numel()) == v.size(), "trainer: batch of {} values for a tensor of {}", v.size(),
            t.numel());
  std::memcpy(t.data_ptr(), v.data(), v.size() * sizeof(T));
  return t;
}

}  // namespace

std::vector<double> PhaseTimes::median_ms() const {
  std::vector<double> out;
  for (const auto& v : seconds) out.push_back(v.empty() ? 0.0 : common::median(v) * 1e3);
  return out;
}

Trainer::Trainer(Config cfg, std::vector<CachedSequence> train, torch::Device device)
    : cfg_(std::move(cfg)), train_(std::move(train)), device_(device) {
  XS_ASSERT(!train_.empty(), "no training sequences");
  for (const auto& s : train_) classes_.push_back(s.key.subject);
  std::sort(classes_.begin(), classes_.end());
  classes_.erase(std::unique(classes_.begin(), classes_.end()), classes_.end());
  for (const auto& s : train_)
    class_of_seq_.push_back(static_cast<int>(std::lower_bound(classes_.begin(), classes_.end(), s.key.subject) - classes_.begin()));
  const bool needs_pose = cfg_.model.mode != ModelMode::Silhouette;
  if (needs_pose) {
    for (const auto& s : train_)
      XS_ASSERT(!s.pose.empty(), "model.mode '{}' reads skeletons but {} has no pose rows (give data.pose, or use "
                "model.mode 'silhouette')", to_string(cfg_.model.mode), sequence_id(s.key));
  }
  XS_ASSERT(static_cast<int>(classes_.size()) >= cfg_.trainer.batch_p,
            "trainer.batch_p = {} identities per batch, but the training split has only {}", cfg_.trainer.batch_p,
            classes_.size());
  torch::manual_seed(cfg_.trainer.seed);
  // Training clips have one shape (P*K x clip_length), so cuDNN's autotuning pays off.
  if (device_.is_cuda()) at::globalContext().setBenchmarkCuDNN(true);
  model_ = nets::GaitNet(cfg_.model, static_cast<int>(classes_.size()));
  model_->to(device_);
  optimizer_ = make_optimizer(cfg_.optimizer, model_);
  graph_allowed_ = cfg_.trainer.cuda_graph && device_.is_cuda() && !cfg_.trainer.profile_phases &&
                   cfg_.optimizer.type == OptimizerType::Adam && GraphStep::available();
  reset_sampler();
}

Trainer::~Trainer() = default;

int Trainer::cuda_graphs() const { return graph_ ? graph_->graphs() : 0; }

Trainer::Prepared Trainer::prepare(int iteration) {
  // Identities from the sampler (in iteration order), clips and augmentation from this
  // iteration's stream.
  Prepared p;
  p.iteration = iteration;
  const std::vector<std::size_t> idx = sampler_->next_batch();
  Rng rng(derive_seed({cfg_.trainer.seed, kStepStream, static_cast<std::uint64_t>(iteration)}));
  std::vector<const CachedSequence*> seqs;
  std::vector<std::vector<int>> clips;
  std::vector<int64_t> labels;
  for (std::size_t i : idx) {
    seqs.push_back(&train_[i]);
    clips.push_back(sample_clip(train_[i].sil.frames(), cfg_.data.clip_length, ClipMode::RandomContiguous, rng));
    labels.push_back(class_of_seq_[i]);
  }
  Batch b = make_batch(seqs, clips, model_->uses_silhouettes());
  augment_batch(b, cfg_.trainer.augment, rng, cfg_.data.loader_threads > 0 ? cfg_.data.loader_threads : 1);
  const bool pin = device_.is_cuda();
  if (model_->uses_silhouettes()) p.sil = host_tensor(b.sil, {b.n, b.t, 64, 44}, torch::kFloat, pin);
  if (model_->uses_pose()) p.pose = host_tensor(b.pose, {b.n, b.t, 17, 3}, torch::kFloat, pin);
  p.labels = host_tensor(labels, {static_cast<int64_t>(labels.size())}, torch::kLong, pin);
  return p;
}

nets::FusionDrop Trainer::fusion_drop(int iteration) const {
  const double p = cfg_.model.fusion.modality_dropout;
  if (p <= 0 || cfg_.model.mode != ModelMode::TwoBranch) return nets::FusionDrop::none;
  Rng rng(derive_seed({cfg_.trainer.seed, kFusionStream, static_cast<std::uint64_t>(iteration)}));
  const double u = rng.uniform();
  return u < 0.5 * p ? nets::FusionDrop::silhouette : u < p ? nets::FusionDrop::skeleton : nets::FusionDrop::none;
}

void Trainer::drop_prefetch() {
  if (!next_.valid()) return;
  try {
    next_.get();
  } catch (...) {
    // A failed prefetch matters only if that batch is used; it is being discarded.
  }
}

void Trainer::reset_sampler() {
  std::vector<int> labels;
  for (const auto& s : train_) labels.push_back(s.key.subject);
  sampler_ = std::make_unique<PxKSampler>(labels, cfg_.trainer.batch_p, cfg_.trainer.batch_k,
                                          derive_seed({cfg_.trainer.seed, kSamplerStream}));
}

torch::Tensor Trainer::device_step(const torch::Tensor& sil, const torch::Tensor& pose, const torch::Tensor& y,
                                  nets::FusionDrop drop, bool captured, const std::function<void(int)>& end_phase) {
  model_->train();
  if (captured) {
    // A graph keeps its gradients: zeroed in place, then accumulated into by backward.
    for (auto& p : model_->parameters())
      if (p.grad().defined()) p.mutable_grad().zero_();
  } else {
    optimizer_->zero_grad();
  }
  nets::GaitNetImpl::Output out;
  {
    AutocastGuard amp(cfg_.trainer.amp && device_.is_cuda());
    out = model_->forward(sil, pose, drop);
  }
  end_phase(2);
  const nets::LossTerms lt = nets::gait_loss(out, y, cfg_.loss, cfg_.model.fusion.branch_loss_weight);
  end_phase(3);
  lt.total.backward();
  end_phase(4);
  if (captured) static_cast<MultiTensorAdam&>(*optimizer_).update();
  else optimizer_->step();
  end_phase(5);
  return lt.packed();
}

bool Trainer::graph_ready() {
  if (graph_) return true;
  if (!graph_allowed_ || eager_steps_ < kEagerStepsBeforeGraphs) return false;
  graph_ = std::make_unique<GraphStep>(
      [this](const torch::Tensor& sil, const torch::Tensor& pose, const torch::Tensor& y, nets::FusionDrop drop) {
        return device_step(sil, pose, y, drop, /*captured=*/true, [](int) {});
      },
      device_);
  return true;
}

StepStats Trainer::step() {
  const auto t0 = std::chrono::steady_clock::now();
  // trainer.profile_phases: close phase i (device synchronised first).
  auto phase_start = t0;
  auto end_phase = [&](int i) {
    if (!cfg_.trainer.profile_phases) return;
    if (device_.is_cuda()) torch::cuda::synchronize();
    const auto now = std::chrono::steady_clock::now();
    phases_.seconds[i].push_back(std::chrono::duration<double>(now - phase_start).count());
    phase_start = now;
  };
  const int it = iteration_;
  const double lr = learning_rate(cfg_.scheduler, cfg_.optimizer.lr, it, cfg_.trainer.iterations, time_progress_);
  for (auto& g : optimizer_->param_groups()) g.options().set_lr(lr);

  // This iteration's batch: prefetched during the previous step or made now.
  Prepared prep;
  if (next_.valid()) {
    prep = next_.get();
    XS_ASSERT(prep.iteration == it, "trainer: prefetched batch of iteration {} at iteration {}", prep.iteration, it);
  } else {
    prep = prepare(it);
  }
  if (cfg_.trainer.prefetch) next_ = std::async(std::launch::async, [this, it] { return prepare(it + 1); });
  end_phase(0);
  torch::Tensor packed;
  if (graph_ready()) {
    static_cast<MultiTensorAdam&>(*optimizer_).advance();
    packed = graph_->run(prep.sil, prep.pose, prep.labels, fusion_drop(it));
  } else {
    // Pinned sources: the copies are queued on the stream and the host goes on; the caching
    // host allocator keeps each buffer until its copy has run.
    const auto in = [&](const torch::Tensor& t) { return t.defined() ? t.to(device_, /*non_blocking=*/true) : t; };
    const torch::Tensor sil = in(prep.sil), pose = in(prep.pose), y = in(prep.labels);
    end_phase(1);
    packed = device_step(sil, pose, y, fusion_drop(it), /*captured=*/false, end_phase);
    ++eager_steps_;
  }
  ++iteration_;

  // The step's one host sync: all its figures in one copy, which also ends the step.
  const std::vector<double> v = nets::LossTerms::unpack(packed);
  end_phase(6);
  StepStats st;
  st.iteration = iteration_;
  st.loss = v[0];
  st.triplet = v[1];
  st.ce = v[2];
  st.accuracy = v[3];
  st.active = v[4];
  st.branches = v[5];
  st.lr = lr;
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  train_seconds_ += st.seconds;
  return st;
}

void Trainer::save(const fs::path& path) const {
  // A finite loss can still be followed by a step that overflows the weights; such a
  // checkpoint would only fail later, in evaluation.
  {
    torch::NoGradGuard no_grad;
    for (const auto& p : model_->named_parameters())
      if (!torch::isfinite(p.value()).all().item<bool>())
        throw common::Error(fmt::format("iteration {}: the weights are not finite after the step ('{}'): training "
                                        "diverged (try a lower optimizer.lr)",
                                        iteration_, p.key()));
  }
  CheckpointMeta m;
  m.iteration = iteration_;
  m.config = to_json(cfg_);
  m.classes = classes_;
  m.train_seconds = train_seconds_;
  save_checkpoint(path, m, *model_, optimizer_.get());
}

void Trainer::resume(const fs::path& checkpoint) {
  const CheckpointMeta m = read_checkpoint_meta(checkpoint);
  const nlohmann::json cur = to_json(cfg_);
  for (const char* section : {"model", "loss", "optimizer", "scheduler"}) {
    const std::string d = first_difference(m.config.value(section, nlohmann::json()), cur[section], section);
    XS_ASSERT(d.empty(), "{}: cannot resume: the checkpoint's {} differs from this config at '{}'", checkpoint.string(),
              section, d);
  }
  for (const char* key : {"batch_p", "batch_k", "seed", "augment"}) {
    const nlohmann::json& theirs = m.config["trainer"][key];
    XS_ASSERT(theirs == cur["trainer"][key], "{}: cannot resume: trainer.{} was {} in the checkpoint, {} now",
              checkpoint.string(), key, theirs.dump(), cur["trainer"][key].dump());
  }
  XS_ASSERT(m.config["data"]["clip_length"] == cur["data"]["clip_length"],
            "{}: cannot resume: data.clip_length differs", checkpoint.string());
  XS_ASSERT(m.classes == classes_, "{}: cannot resume: it was trained on {} identities, this data has {} (or others)",
            checkpoint.string(), m.classes.size(), classes_.size());
  load_checkpoint(checkpoint, *model_, optimizer_.get(), device_);
  // Loading may replace the tensors a captured step reads and writes: capture again.
  graph_.reset();
  eager_steps_ = 0;
  drop_prefetch();
  iteration_ = m.iteration;
  train_seconds_ = m.train_seconds;
  reset_sampler();
  for (int i = 0; i < iteration_; ++i) sampler_->next_batch();
}

RunSummary Trainer::run(bool progress, const fs::path& dir) {
  const auto run_start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count(); };
  const fs::path out = dir.empty() ? fs::path(cfg_.trainer.out_dir) : dir;
  fs::create_directories(out / "checkpoints");
  common::write_file_atomic(out / "config.json", to_json(cfg_).dump(2) + "\n");
  const fs::path log_path = out / "train_log.csv";
  const bool new_log = !fs::exists(log_path) || iteration_ == 0;
  std::ofstream log(log_path, new_log ? std::ios::trunc : std::ios::app);
  XS_ASSERT(log, "{}: cannot write", log_path.string());
  if (new_log) log << "iteration,loss,triplet,ce,accuracy,active,lr,seq_per_s,train_seconds,branch_losses\n";

  RunSummary sum;
  sum.start_iteration = iteration_;
  const double budget = cfg_.trainer.max_minutes * 60.0;
  // fit_schedule_to_time: the cosine's progress is max(iterations, elapsed / budget)
  // (schedule.hpp), so the schedule ends at the budget however the step time changes.
  const bool time_schedule = budget > 0 && cfg_.trainer.fit_schedule_to_time;
  if (time_schedule) {
    fmt::print("trainer.fit_schedule_to_time: the cosine's progress is max(iteration / {}, elapsed / {:.2f} min)\n",
               cfg_.trainer.iterations, cfg_.trainer.max_minutes);
    std::fflush(stdout);
  }
  time_progress_ = 0;
  const double batch = static_cast<double>(cfg_.trainer.batch_p) * cfg_.trainer.batch_k;
  common::ProgressBar bar("train", static_cast<std::size_t>(std::max(0, cfg_.trainer.iterations - iteration_)), progress);
  double ema_loss = -1, ema_rate = -1;
  while (iteration_ < cfg_.trainer.iterations) {
    StepStats st;
    try {
      st = step();
    } catch (const common::Error&) {
      throw;
    } catch (const c10::Error& e) {  // LibTorch's own checks: one line, not a backtrace
      const std::string what = e.what_without_backtrace();
      throw common::Error(
          fmt::format("iteration {}: the training step failed: {}", iteration_ + 1, what.substr(0, what.find('\n'))));
    } catch (const std::exception& e) {  // e.g. a learning rate a float cannot hold (std::runtime_error)
      throw common::Error(fmt::format("iteration {}: the training step failed: {}", iteration_ + 1, e.what()));
    }
    const double rate = batch / std::max(st.seconds, 1e-9);
    ema_loss = ema_loss < 0 ? st.loss : 0.9 * ema_loss + 0.1 * st.loss;
    ema_rate = ema_rate < 0 ? rate : 0.9 * ema_rate + 0.1 * rate;
    if (!std::isfinite(st.loss))
      throw common::Error(fmt::format("iteration {}: the loss is not finite ({}): training diverged (try a lower "
                                      "optimizer.lr)",
                                      st.iteration, st.loss));
    bar.set_status(fmt::format("loss {:.3f} (tri {:.3f} ce {:.3f}) acc {:.2f} lr {:.1e} {:.1f} seq/s", ema_loss,
                               st.triplet, st.ce, st.accuracy, st.lr, ema_rate));
    bar.tick();
    const double now = elapsed();
    if (time_schedule) time_progress_ = std::min(1.0, now / budget);
    const int total = cfg_.trainer.iterations;
    const bool out_of_time = budget > 0 && now >= budget && st.iteration < total;
    if (st.iteration % cfg_.trainer.log_every == 0 || st.iteration == total || out_of_time) {
      log << fmt::format("{},{:.6f},{:.6f},{:.6f},{:.4f},{:.4f},{:.6g},{:.2f},{:.1f},{:.6f}\n", st.iteration, st.loss,
                         st.triplet, st.ce, st.accuracy, st.active, st.lr, rate, train_seconds_, st.branches);
      log.flush();
    }
    if (st.iteration % cfg_.trainer.save_every == 0 || st.iteration == total || out_of_time) {
      save(out / "checkpoints" / fmt::format("iter-{:07d}{}", st.iteration, kCheckpointExtension));
      save(out / fmt::format("latest{}", kCheckpointExtension));
    }
    if (out_of_time) {
      sum.stopped_by_time = true;
      break;
    }
  }
  bar.finish();
  time_progress_ = 0;  // a step() after run() follows the iteration schedule again
  sum.iterations = iteration_;
  sum.planned_iterations = cfg_.trainer.iterations;
  sum.run_seconds = elapsed();
  sum.train_seconds = train_seconds_;
  sum.phases = phases_;
  nlohmann::json j = {{"start_iteration", sum.start_iteration},
                            {"iterations", sum.iterations},
                            {"planned_iterations", sum.planned_iterations},
                            {"stopped_by_time", sum.stopped_by_time},
                            {"max_minutes", cfg_.trainer.max_minutes},
                            {"run_seconds", std::round(sum.run_seconds * 10) / 10},
                            {"train_seconds", std::round(sum.train_seconds * 10) / 10},
                            {"mode", to_string(cfg_.model.mode)},
                            {"cuda_graphs", cuda_graphs()},
                            {"device", device_.str()}};
  if (phases_.steps() > 0) {
    const std::vector<double> med = phases_.median_ms();
    nlohmann::json ms;
    for (int i = 0; i < PhaseTimes::kCount; ++i) ms[PhaseTimes::kNames[i]] = std::round(med[i] * 1e3) / 1e3;
    j["phase_median_ms"] = ms;
    j["phase_steps"] = phases_.steps();
  }
  common::write_file_atomic(out / "train_summary.json", j.dump(2) + "\n");
  return sum;
}

}  // namespace gait::train
