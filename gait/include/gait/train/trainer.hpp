// The training loop. One step:
//
//   P x K sampler (gait/sampler.hpp)          P identities x K sequences
//   clips: 30 contiguous frames at random      sample_clip(RandomContiguous)
//   make_batch + augment_batch                 sil [n, 30, 64, 44], pose [n, 30, 17, 3]
//   GaitNet forward (bf16 autocast on CUDA)    embed, bn, logits
//   triplet(embed) + CE(logits)                losses.hpp
//   backward, optimizer step                   lr from schedule.hpp, a function of the iteration
//
// Determinism: the model is initialised after torch::manual_seed(trainer.seed); step i
// draws clips and augmentation from Rng(derive_seed(seed, i)), and the sampler's
// stream is a function of the seed and the number of batches drawn. A resumed run is
// therefore the same computation as an uninterrupted one (checkpoint.hpp).
#pragma once

#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <vector>

#include "gait/nets/gait_net.hpp"
#include "gait/sampler.hpp"
#include "gait/seq_cache.hpp"
#include "gait/train/config.hpp"

namespace gait::train {

class GraphStep;

struct StepStats {
  int iteration = 0;  // after the step
  double loss = 0, triplet = 0, ce = 0, accuracy = 0, active = 0, lr = 0, seconds = 0;
  double branches = 0;  // the branch heads' losses (LossTerms::branches), 0 without them
};

// Where a step's time goes, with trainer.profile_phases: the device is synchronised at
// the end of each phase, so each phase's wall time is its own (the step then overlaps
// nothing: a profiled run is slower than a plain one, and its throughput is not reported).
struct PhaseTimes {
  static constexpr const char* kNames[] = {"batch_wait", "copy_in", "forward", "loss", "backward", "optimizer",
                                           "read_back"};
  static constexpr int kCount = 7;
  std::vector<double> seconds[kCount];  // one sample per profiled step
  // Median milliseconds of each phase (robust to the first steps' cuDNN autotuning).
  std::vector<double> median_ms() const;
  std::size_t steps() const { return seconds[0].size(); }
};

// What one run() did (also written to out_dir/train_summary.json).
struct RunSummary {
  int start_iteration = 0;      // where this run began (> 0 after a resume)
  int iterations = 0;           // iteration reached
  int planned_iterations = 0;   // trainer.iterations (the ceiling)
  bool stopped_by_time = false; // trainer.max_minutes ended the run
  double run_seconds = 0;       // wall time of this run (steps, logs, checkpoints)
  double train_seconds = 0;     // the checkpoint's cumulative time in steps
  PhaseTimes phases;            // with trainer.profile_phases (no steps otherwise)
};

class Trainer {
 public:
  // `train`: the training sequences (the protocol's training identities). Throws when the
  // model needs pose and the data has none, or when there are fewer than P identities.
  Trainer(Config cfg, std::vector<CachedSequence> train, torch::Device device);
  ~Trainer();

  // Restores the model, the optimizer, the CPU RNG and the iteration count, and replays
  // the sampler. The checkpoint's model, loss, optimizer, scheduler and sampling settings
  // and its identities must equal this run's (an error names the first difference).
  void resume(const std::filesystem::path& checkpoint);

  StepStats step();
  void save(const std::filesystem::path& path) const;

  // Steps to trainer.iterations with a progress bar (loss, throughput), appends rows to
  // out_dir/train_log.csv and writes checkpoints every trainer.save_every iterations and
  // at the end: out_dir/checkpoints/iter-NNNNNNN.gckpt and out_dir/latest.gckpt.
  // With trainer.max_minutes the run also ends after the step that reaches the time
  // limit (checkpoint and log row written there); with fit_schedule_to_time the cosine
  // schedule's progress also follows the elapsed fraction of the limit (schedule.hpp).
  // `dir` (default: trainer.out_dir) is where those files go: `gait train` passes a
  // staging folder that becomes out_dir only when the run succeeds.
  RunSummary run(bool progress, const std::filesystem::path& dir = {});

  int iteration() const { return iteration_; }
  int cuda_graphs() const;  // CUDA graphs captured (trainer.cuda_graph), 0 while eager
  double train_seconds() const { return train_seconds_; }
  nets::GaitNet& model() { return model_; }
  const std::vector<int>& classes() const { return classes_; }
  const Config& config() const { return cfg_; }

 private:
  // One step's input: the sampler's next P x K draw and this iteration's clips and
  // augmentation (Rng(derive_seed(seed, iteration))), as host tensors ready for the
  // device: in page-locked memory when training on CUDA, so the step's copies are
  // asynchronous and the pinning is paid on the prefetch thread.
  struct Prepared {
    int iteration = -1;
    torch::Tensor sil, pose, labels;  // undefined where the model does not read them
  };
  Prepared prepare(int iteration);
  void drop_prefetch();  // waits for a batch being prepared and discards it (sampler untouched since)
  // The step's device work on device tensors: gradients zeroed, forward (bf16 autocast on
  // CUDA), loss, backward, optimizer. `captured`: the form a CUDA graph records (gradients
  // zeroed in place, the optimizer's device half). Returns LossTerms::packed().
  torch::Tensor device_step(const torch::Tensor& sil, const torch::Tensor& pose, const torch::Tensor& y,
                            nets::FusionDrop drop, bool captured, const std::function<void(int)>& end_phase);
  // With trainer.cuda_graph on CUDA, after kEagerStepsBeforeGraphs eager steps (cuDNN's
  // autotuning and the gradients' allocation happen there): creates graph_; true once it exists.
  bool graph_ready();
  static constexpr int kEagerStepsBeforeGraphs = 3;
  void reset_sampler();
  Config cfg_;
  std::vector<CachedSequence> train_;
  torch::Device device_;
  std::vector<int> classes_, class_of_seq_;
  nets::GaitNet model_{nullptr};
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<PxKSampler> sampler_;
  int iteration_ = 0;
  double train_seconds_ = 0;
  double time_progress_ = 0;  // elapsed / trainer.max_minutes in run() with fit_schedule_to_time, else 0
  PhaseTimes phases_;          // trainer.profile_phases: accumulated by step()
  bool graph_allowed_ = false; // trainer.cuda_graph, on CUDA, Adam, not profiling phases
  int eager_steps_ = 0;        // eager steps since construction or resume
  std::unique_ptr<GraphStep> graph_;
  // Which branch the fused head misses at `iteration` (model.fusion.modality_dropout),
  // from the iteration's own stream: the same on a resumed run.
  nets::FusionDrop fusion_drop(int iteration) const;
  // With trainer.prefetch the next iteration's batch is prepared on a worker thread
  // while this one runs (on CUDA the CPU work, silhouette warps above all, otherwise
  // left the GPU half idle). Batches are the same with or without it: the sampler is drawn in
  // iteration order and each iteration's draws come from its own stream. Declared
  // last: destroyed (joined) before the members it reads.
  std::future<Prepared> next_;
};

}  // namespace gait::train
