// `gait train --config CFG`: see gait/eval/model_commands.hpp.
#include <fmt/format.h>

#include <optional>
#include <thread>

#include "gait/eval/commands.hpp"
#include "common/check.hpp"
#include "common/files.hpp"
#include "common/plot.hpp"
#include "common/validate.hpp"
#include "gait/train/amp.hpp"
#include "gait/train/checkpoint.hpp"
#include "gait/train/curves.hpp"
#include "gait/train/data_source.hpp"
#include "gait/train/trainer.hpp"

namespace gait::cli {

namespace fs = std::filesystem;

namespace {

struct TrainArgs {
  std::string config, data, pose, cache, out, device, resume_from;
  // Empty: the config's value (trainer.iterations, trainer.threads, trainer.max_minutes).
  std::optional<int> iterations, threads;
  std::optional<double> max_minutes;
  std::optional<std::uint64_t> seed;
  bool resume = false, force = false, no_progress = false, cache_only = false;
};

std::int64_t count_parameters(torch::nn::Module& m) {
  std::int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

// The config with the command line's overrides, validated again as a whole.
train::Config configured(const TrainArgs& a) {
  train::Config cfg = train::load_config(a.config);
  if (!a.data.empty()) cfg.data.root = a.data;
  if (!a.pose.empty()) cfg.data.pose = a.pose;
  if (!a.cache.empty()) cfg.data.cache = a.cache;
  if (!a.out.empty()) cfg.trainer.out_dir = a.out;
  if (!a.device.empty()) cfg.trainer.device = a.device;
  if (a.iterations) cfg.trainer.iterations = *a.iterations;
  if (a.threads) cfg.trainer.threads = *a.threads;
  if (a.seed) cfg.trainer.seed = *a.seed;
  if (a.max_minutes) cfg.trainer.max_minutes = *a.max_minutes;
  if (a.cache_only) cfg.data.cache_only = true;
  return train::parse_config(train::to_json(cfg), a.config);
}

// The curves are a view of the log: a build without charts, or a log they cannot be drawn
// from, costs the picture, not the run.
bool draw_curves(const fs::path& dir, const fs::path& out_dir) {
  if (!common::plot::charts_available()) {
    fmt::print(stderr, "train_curves.png: skipped, this build draws no charts (PLplot was not found)\n");
    return false;
  }
  try {
    const std::string run = (out_dir / "").parent_path().filename().string();  // "run/" too
    train::write_train_curves(dir / "train_log.csv", dir / "train_curves.png", run);
    return true;
  } catch (const common::Error& e) {
    fmt::print(stderr, "train_curves.png: not drawn: {}\n", e.what());
    return false;
  }
}

// Before the data is read: an output folder that cannot be written, or a finished run's
// checkpoint that a fresh run would overwrite, is refused now. Returns OUT/latest.gckpt.
fs::path check_run_folder(const TrainArgs& a, const fs::path& out_dir) {
  common::check_output_dir(out_dir, a.out.empty() ? "train: trainer.out_dir" : "train: --out");
  const fs::path latest = out_dir / fmt::format("latest{}", train::kCheckpointExtension);
  const bool resuming = a.resume || !a.resume_from.empty();
  XS_ASSERT(!(resuming && a.force), "--force starts a new run; it does not go with --resume or --resume-from");
  XS_ASSERT(!a.resume || !a.resume_from.empty() || fs::exists(latest), "--resume: {} holds no checkpoint ({})",
            out_dir.string(), latest.filename().string());
  XS_ASSERT(resuming || a.force || !fs::exists(latest),
            "{} holds a checkpoint ({}): --resume continues that run, --force starts a new one over it, or give another --out",
            out_dir.string(), latest.filename().string());
  // The checkpoint to resume is checked (CRC and content) now, not after the data is read.
  if (resuming) train::read_checkpoint_meta(!a.resume_from.empty() ? fs::path(a.resume_from) : latest);
  return latest;
}

// --force, once the new run has succeeded: the earlier run's checkpoints go, so none of
// them can pass for this run's. Returns how many were removed.
std::size_t remove_earlier_checkpoints(const fs::path& out_dir, const fs::path& latest) {
  std::error_code ec;
  std::size_t removed = fs::remove(latest, ec);
  for (const auto& e : fs::directory_iterator(out_dir / "checkpoints", ec))
    if (e.path().extension() == train::kCheckpointExtension) removed += fs::remove(e.path(), ec);
  return removed;
}

void run_train(const TrainArgs& a) {
  const train::Config cfg = configured(a);
  const bool progress = !a.no_progress;
  const bool resuming = a.resume || !a.resume_from.empty();
  const fs::path out_dir = cfg.trainer.out_dir;
  const fs::path latest = check_run_folder(a, out_dir);

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
  // The run writes into a stage that becomes OUT only if it succeeds: a run that fails
  // (a non-finite loss, an error, a full disk) leaves OUT as it was.
  common::OutputStage stage(out_dir);
  std::error_code ec;
  if (resuming && fs::exists(out_dir / "train_log.csv", ec))
    fs::copy_file(out_dir / "train_log.csv", stage.dir() / "train_log.csv");
  const double before = trainer.train_seconds();
  train::RunSummary sum;
  try {
    sum = trainer.run(progress, stage.dir());
  } catch (const common::Error& e) {
    throw common::Error(fmt::format("{}; nothing of this run was written to {}", e.what(), out_dir.string()));
  }
  const bool curves = draw_curves(stage.dir(), out_dir);
  const std::size_t removed = a.force ? remove_earlier_checkpoints(out_dir, latest) : 0;
  stage.commit();
  if (a.force) fmt::print("--force: removed {} checkpoint(s) of the earlier run in {}\n", removed, out_dir.string());
  if (sum.stopped_by_time)
    fmt::print("trainer.max_minutes = {}: stopped at the time limit after iteration {} of {}\n", cfg.trainer.max_minutes,
               sum.iterations, sum.planned_iterations);
  fmt::print("trained to iteration {} in {:.1f} s ({:.1f} s this run); checkpoint {}/latest{}{}\n",
             trainer.iteration(), trainer.train_seconds(), trainer.train_seconds() - before, cfg.trainer.out_dir,
             train::kCheckpointExtension,
             curves ? fmt::format(", curves {}/train_curves.png", cfg.trainer.out_dir) : std::string());
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* c = app.add_subcommand("train", "Train a gait network from a JSON config");
  c->add_option("--config", args->config, "config JSON (gait/configs/*.json)")
      ->required()
      ->check(common::validate::readable_file());
  c->add_option("--data", args->data, "dataset root (overrides data.root)");
  c->add_option("--pose", args->pose, "pose CSV file or folder (overrides data.pose)");
  c->add_option("--cache", args->cache, "preprocessed cache folder (overrides data.cache)");
  c->add_flag("--cache-only", args->cache_only, "read the cache that gait preprocess built, without listing the dataset");
  c->add_option("--out", args->out, "output folder (overrides trainer.out_dir)")
      ->check(common::validate::output_folder());
  c->add_option("--iterations", args->iterations, "iterations (overrides trainer.iterations)")
      ->check(common::validate::min(1, "iterations"));
  c->add_option("--device", args->device, "auto, cpu or cuda (overrides trainer.device)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  c->add_option("--threads", args->threads, "CPU threads, 0 = all (overrides trainer.threads)")
      ->check(common::validate::min(0, "threads", "0: all cores"));
  c->add_option("--seed", args->seed, "seed of weights, batches and augmentation (overrides trainer.seed)");
  c->add_option("--max-minutes", args->max_minutes, "wall-clock limit of this run, 0 = none (overrides trainer.max_minutes)")
      ->check(common::validate::min(0, "minutes", "0: no limit"));
  c->add_flag("--resume", args->resume, "continue from OUT/latest.gckpt");
  c->add_option("--resume-from", args->resume_from, "continue from this checkpoint")
      ->check(common::validate::readable_file());
  c->add_flag("--force", args->force, "start a new run in an --out that holds a checkpoint (removes the earlier run's checkpoints, rewrites its log)");
  c->add_flag("--no-progress", args->no_progress, "no progress bar");
  c->callback([args] { run_train(*args); });
}

}  // namespace gait::cli
