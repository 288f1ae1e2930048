// gait index ROOT [--pose PATH] [--json FILE]
//   Per subject/condition/view counts of sequences, silhouette frames and pose rows,
//   and what was skipped or repaired. Exit 1 when no usable sequence exists.
// gait preprocess ROOT --cache DIR [--pose PATH] [--threads N] [--force]
//   Builds the preprocessed cache (one .gseq file per sequence) with a progress bar.
#include <fmt/format.h>

#include <map>
#include <set>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "common/check.hpp"
#include "common/files.hpp"
#include "common/validate.hpp"
#include "gait/cache_build.hpp"
#include "gait/dataset.hpp"

namespace gait::cli {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kShownProblems = 10;

void print_problems(const std::vector<std::string>& problems) {
  for (std::size_t i = 0; i < std::min(problems.size(), kShownProblems); ++i) fmt::print(stderr, "  {}\n", problems[i]);
  if (problems.size() > kShownProblems) fmt::print(stderr, "  ... and {} more\n", problems.size() - kShownProblems);
}

void print_pose_stats(const PoseCsvStats& p) {
  fmt::print("pose rows: {} read, {} used, {} skipped (wrong field count {}, bad image_name {}, duplicate {}, no valid joint {}); "
             "joints repaired {}, unrepairable {}\n",
             p.rows, p.rows_used, p.skipped_rows(), p.bad_field_count, p.bad_name, p.duplicate, p.all_joints_invalid,
             p.joints_repaired, p.joints_unrepairable);
}

void run_index(const fs::path& root, const std::optional<fs::path>& pose, const fs::path& json_out) {
  if (!json_out.empty()) common::check_output_path(json_out, "index: --json");  // before the scan
  const DatasetIndex idx = scan_dataset(resolve_dataset(root, pose));
  const DatasetCounts counts = count_dataset(idx);
  fmt::print("silhouettes: {}\npose: {}\n\n", idx.paths.silhouettes.string(),
             idx.paths.pose ? idx.paths.pose->string() : std::string("(none)"));
  fmt::print("subject |   nm seq  frames  pose |   bg seq  frames  pose |   cl seq  frames  pose\n");
  for (const auto& [s, conds] : counts.by_subject) {
    std::string line = fmt::format("{:>7}", subject_name(s));
    for (Condition c : kConditions) {
      const auto it = conds.find(c);
      const SequenceCounts k = it == conds.end() ? SequenceCounts{} : it->second;
      line += fmt::format(" | {:8} {:7} {:5}", k.sequences, k.frames, k.pose_rows);
    }
    fmt::print("{}\n", line);
  }
  fmt::print("\nview | sequences  frames  pose rows  aligned frames\n");
  for (const auto& [v, k] : counts.by_view)
    fmt::print("{:>4} | {:9} {:7} {:10} {:15}\n", view_name(v), k.sequences, k.frames, k.pose_rows, k.aligned);
  const IndexReport& r = idx.report;
  fmt::print("\n{} subjects, {} sequences ({} with silhouettes, {} with pose, {} with both), {} frames, {} aligned\n",
             counts.by_subject.size(), r.sequences, r.with_silhouettes, r.with_pose, r.with_both, counts.total.frames,
             counts.total.aligned);
  fmt::print("missing from the standard CASIA-B layout of these subjects: {} sequences\n", counts.missing_standard);
  fmt::print("skipped: {} empty folders, {} ignored names; {} sequences aligned by resampling\n", r.empty_folders,
             r.ignored_names, r.resampled);
  if (idx.has_pose()) print_pose_stats(r.pose);
  print_problems(r.problems);
  print_problems(r.pose.problems);
  // Written only for a usable dataset: a failed index leaves an earlier JSON as it was.
  if (r.with_silhouettes == 0) throw common::Error(fmt::format("{}: no usable sequence", root.string()));
  if (!json_out.empty()) {
    nlohmann::json j;
    for (const auto& [s, conds] : counts.by_subject_view)
      for (const auto& [c, views] : conds)
        for (const auto& [v, k] : views)
          j["counts"][subject_name(s)][std::string(condition_name(c))][view_name(v)] = {
              {"sequences", k.sequences}, {"frames", k.frames}, {"pose_rows", k.pose_rows}, {"aligned", k.aligned}};
    j["totals"] = {{"sequences", r.sequences}, {"with_silhouettes", r.with_silhouettes}, {"with_pose", r.with_pose},
                   {"with_both", r.with_both}, {"frames", counts.total.frames}, {"aligned_frames", counts.total.aligned},
                   {"missing_standard_sequences", counts.missing_standard}, {"empty_folders", r.empty_folders}, {"ignored_names", r.ignored_names},
                   {"pose_rows_skipped", r.pose.skipped_rows()}, {"joints_repaired", r.pose.joints_repaired},
                   {"joints_unrepairable", r.pose.joints_unrepairable}};
    common::write_file_atomic(json_out, j.dump(1));
  }
}

void run_preprocess(const fs::path& root, const std::optional<fs::path>& pose, const fs::path& cache,
                    const CacheBuildOptions& opts) {
  common::check_output_dir(cache, "preprocess: --cache");
  const DatasetIndex idx = scan_dataset(resolve_dataset(root, pose));
  fmt::print("{} sequences indexed; building {}\n", idx.entries.size(), cache.string());
  // New files and preprocess.json go to a stage that joins the cache only on success.
  common::OutputStage stage(cache);
  CacheBuildOptions staged = opts;
  staged.write_dir = stage.dir();
  const CacheBuildReport r = build_cache(idx, cache, staged);
  const SilReadStats& s = r.sil;
  fmt::print("cache: {} written, {} reused, {} frames; skipped {} too short, {} without pose, {} without silhouettes\n",
             r.written, r.reused, r.frames, r.skipped_too_short, r.skipped_no_pose, r.skipped_no_silhouettes);
  fmt::print("frames: {} decoded, {} used, {} near-empty, {} without centre, {} corrupt, {} wrong size, {} without pose row\n",
             s.files, s.used, s.near_empty, s.no_centre, s.corrupt, s.bad_size, r.frames_without_pose);
  if (idx.has_pose()) print_pose_stats(idx.report.pose);
  print_problems(s.problems);
  print_problems(r.problems);
  nlohmann::json j = {{"root", root.string()}, {"sequences_written", r.written}, {"sequences_reused", r.reused},
                      {"frames", r.frames}, {"skipped_too_short", r.skipped_too_short},
                      {"skipped_no_pose", r.skipped_no_pose}, {"frames_corrupt", s.corrupt},
                      {"frames_bad_size", s.bad_size}, {"frames_near_empty", s.near_empty}};
  if (r.usable() == 0) throw common::Error(fmt::format("{}: nothing usable to cache", root.string()));
  common::write_file_atomic(stage.dir() / "preprocess.json", j.dump(1));
  stage.commit();
}

}  // namespace

void add_dataset_commands(CLI::App& app) {
  auto* root = new fs::path;
  auto* pose = new std::optional<fs::path>;
  auto* pose_arg = new fs::path;
  auto* json = new fs::path;
  auto* index = app.add_subcommand("index", "Count sequences, frames and pose rows per subject, condition and view");
  index->add_option("root", *root, "Dataset root: a gait synth output, or a CASIA-B silhouette folder")
      ->required()
      ->check(common::validate::existing_folder());
  index->add_option("--pose", *pose_arg, "GaitGraph pose CSV file or folder (default: ROOT/pose when present)")
      ->check(CLI::ExistingPath);
  index->add_option("--json", *json, "Also write the counts as JSON");
  index->callback([=] {
    if (!pose_arg->empty()) *pose = *pose_arg;
    run_index(*root, *pose, *json);
  });

  auto* cache = new fs::path;
  auto* opts = new CacheBuildOptions;
  auto* no_progress = new bool(false);
  auto* pre = app.add_subcommand("preprocess", "Build the preprocessed 64x44 sequence cache");
  pre->add_option("root", *root, "Dataset root")->required()->check(common::validate::existing_folder());
  pre->add_option("--cache", *cache, "Cache folder")->required();
  pre->add_option("--pose", *pose_arg, "GaitGraph pose CSV file or folder")->check(CLI::ExistingPath);
  pre->add_option("--threads", opts->threads, "Worker threads (default 0: all cores)")
      ->check(common::validate::min(0, "threads", "0: all cores"));
  pre->add_flag("--force", opts->force, "Rebuild files that are already cached");
  pre->add_flag("--no-progress", *no_progress, "No progress bar");
  pre->callback([=] {
    if (!pose_arg->empty()) *pose = *pose_arg;
    opts->progress = !*no_progress;
    run_preprocess(*root, *pose, *cache, *opts);
  });
}

}  // namespace gait::cli
