// `gait train --config CFG`: see gait/eval/model_commands.hpp.
#include <fmt/format.h>

#include <optional>
#include <thread>

#include "gait/eval/commands.hpp"
#include "common/check.hpp"
#include "common/files.hpp"
#include "gait/train/amp.hpp"
#include "gait/train/checkpoint.hpp"
#include "gait/train/data_source.hpp"
#include "gait/train/trainer.hpp"

namespace gait::cli {

namespace fs = std::filesystem;

namespace {

struct TrainArgs {
  std::string config, data, pose, cache, out, device, resume_from;
  int iterations = 0, threads = -1;
  std::optional<std::uint64_t> seed;
  double max_minutes = -1;  // -1: the config's trainer.max_minutes
  bool resume = false, force = false, no_progress = false, cache_only = false;
};

std::int64_t count_parameters(torch::nn::Module& m) {
  std::int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

void run_train(const TrainArgs& a) {
  train::Config cfg = train::load_config(a.config);
  if (!a.data.empty()) cfg.data.root = a.data;
  if (!a.pose.empty()) cfg.data.pose = a.pose;
  if (!a.cache.empty()) cfg.data.cache = a.cache;
  if (!a.out.empty()) cfg.trainer.out_dir = a.out;
  if (!a.device.empty()) cfg.trainer.device = a.device;
  if (a.iterations > 0) cfg.trainer.iterations = a.iterations;
  if (a.threads >= 0) cfg.trainer.threads = a.threads;
  if (a.seed) cfg.trainer.seed = *a.seed;
  if (a.max_minutes >= 0) cfg.trainer.max_minutes = a.max_minutes;
  if (a.cache_only) cfg.data.cache_only = true;
  cfg = train::parse_config(train::to_json(cfg), a.config);  // re-validate the overrides
  const bool progress = !a.no_progress;
  // Before the data is read: an output folder that cannot be written, or a finished run's
  // checkpoint that a fresh run would overwrite, is refused now.
  const fs::path out_dir = cfg.trainer.out_dir;
  common::check_output_dir(out_dir, a.out.empty() ? "train: trainer.out_dir" : "train: --out");
  const fs::path latest = out_dir / fmt::format("latest{}", train::kCheckpointExtension);
  const bool resuming = a.resume || !a.resume_from.empty();
  XS_ASSERT(!(resuming && a.force), "--force starts a new run; it does not go with --resume or --resume-from");
  XS_ASSERT(!a.resume || !a.resume_from.empty() || fs::exists(latest), "--resume: {} holds no checkpoint ({})",
            out_dir.string(), latest.filename().string());
  XS_ASSERT(resuming || a.force || !fs::exists(latest),
            "{} holds a checkpoint ({}): --resume continues that run, --force starts a new one over it, or give another --out",
            out_dir.string(), latest.filename().string());
  if (a.force && fs::exists(latest)) {
    // Starting over: the old run's checkpoints go, so none of them can pass for this run's.
    std::size_t removed = fs::remove(latest);
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(out_dir / "checkpoints", ec))
      if (e.path().extension() == train::kCheckpointExtension) removed += fs::remove(e.path());
    fmt::print("--force: removed {} checkpoint(s) of the earlier run in {}\n", removed, out_dir.string());
  }

  at::set_num_threads(cfg.trainer.threads > 0 ? cfg.trainer.threads
                                              : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  const torch::Device device = train::resolve_device(cfg.trainer.device);
  const train::DataSource src = train::open_data_source(cfg.data, progress);
  const auto idx = train::select_entries(src, true);
  XS_ASSERT(!idx.empty(), "{}: no training sequences (subjects 1..{})", cfg.data.root, src.protocol.train_last_subject);
  std::vector<CachedSequence> seqs = train::load_sequences(src, idx, cfg.data.loader_threads);
  fmt::print("data: {} training sequences of subjects 1..{} from {}\n", seqs.size(), src.protocol.train_last_subject,
             src.cache_dir.string());

  train::Trainer trainer(cfg, std::move(seqs), device);
  fmt::print("model: {} ({} parameters, {} identities), device {}, {} threads{}\n", train::to_string(cfg.model.mode),
             count_parameters(*trainer.model()), trainer.classes().size(), device.str(), at::get_num_threads(),
             device.is_cuda() && cfg.trainer.amp ? ", bf16 autocast" : "");
  if (resuming) {
    const fs::path ckpt = !a.resume_from.empty() ? fs::path(a.resume_from) : latest;
    trainer.resume(ckpt);
    fmt::print("resumed from {} at iteration {}\n", ckpt.string(), trainer.iteration());
  }
  const double before = trainer.train_seconds();
  const train::RunSummary sum = trainer.run(progress);
  if (sum.stopped_by_time)
    fmt::print("trainer.max_minutes = {}: stopped at the time limit after iteration {} of {}\n", cfg.trainer.max_minutes,
               sum.iterations, sum.planned_iterations);
  fmt::print("trained to iteration {} in {:.1f} s ({:.1f} s this run); checkpoint {}/latest{}\n", trainer.iteration(),
             trainer.train_seconds(), trainer.train_seconds() - before, cfg.trainer.out_dir, train::kCheckpointExtension);
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* c = app.add_subcommand("train", "Train a gait network from a JSON config");
  c->add_option("--config", args->config, "config JSON (gait/configs/*.json)")->required()->check(CLI::ExistingFile);
  c->add_option("--data", args->data, "dataset root (overrides data.root)");
  c->add_option("--pose", args->pose, "pose CSV file or folder (overrides data.pose)");
  c->add_option("--cache", args->cache, "preprocessed cache folder (overrides data.cache)");
  c->add_flag("--cache-only", args->cache_only, "read the cache that gait preprocess built, without listing the dataset");
  c->add_option("--out", args->out, "output folder (overrides trainer.out_dir)");
  c->add_option("--iterations", args->iterations, "iterations (overrides trainer.iterations)");
  c->add_option("--device", args->device, "auto, cpu or cuda (overrides trainer.device)");
  c->add_option("--threads", args->threads, "CPU threads, 0 = all (overrides trainer.threads)");
  c->add_option("--seed", args->seed, "seed of weights, batches and augmentation (overrides trainer.seed)");
  c->add_option("--max-minutes", args->max_minutes, "wall-clock limit of this run, 0 = none (overrides trainer.max_minutes)");
  c->add_flag("--resume", args->resume, "continue from OUT/latest.gckpt");
  c->add_option("--resume-from", args->resume_from, "continue from this checkpoint")->check(CLI::ExistingFile);
  c->add_flag("--force", args->force, "start a new run in an --out that holds a checkpoint (removes the earlier run's checkpoints, rewrites its log)");
  c->add_flag("--no-progress", args->no_progress, "no progress bar");
  c->callback([args] { run_train(*args); });
}

}  // namespace gait::cli
