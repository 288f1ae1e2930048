// gait synth --out DIR [--subjects 124] [--seed S] [--motion cmu|procedural|mixed]
//            [--mocap DIR] [--small] [--views 0,90,...] [--threads N] [--force]
#include <fmt/format.h>

#include <map>

#include "commands.hpp"
#include "common/check.hpp"
#include "gait/synth/synth.hpp"

namespace gait::cli {

namespace {
struct SynthArgs {
  SynthOptions opts;
  std::string motion = "mixed";
  bool small = false, no_progress = false;
  std::vector<int> views;
};

void run_synth(SynthArgs& a) {
  const std::map<std::string, MotionSource> motions = {
      {"cmu", MotionSource::Cmu}, {"procedural", MotionSource::Procedural}, {"mixed", MotionSource::Mixed}};
  const auto m = motions.find(a.motion);
  XS_ASSERT(m != motions.end(), "--motion must be cmu, procedural or mixed (got '{}')", a.motion);
  a.opts.gen.motion = m->second;
  if (a.small) a.opts.gen.subjects = kSmallSubjects;
  if (!a.views.empty()) {
    for (int v : a.views) XS_ASSERT(v >= 0 && v <= 180, "--views: {} is not an angle in 0..180", v);
    a.opts.gen.views = a.views;
  }
  a.opts.progress = !a.no_progress;
  const SynthReport r = synthesize(a.opts);
  fmt::print("{}: {} sequences, {} silhouette frames, {} pose rows in {:.1f} s\n", a.opts.out.string(), r.sequences,
             r.frames, r.pose_rows, r.seconds);
  fmt::print("motion: {} ({} gait cycles of {} captured people); joints inside the silhouette: {:.2f}% of {} visible\n",
             a.motion, r.mocap_cycles, r.mocap_persons_used.size(), 100 * r.joint_in_silhouette(), r.joints_checked);
}
}  // namespace

void add_synth_command(CLI::App& app) {
  auto* a = new SynthArgs;
  auto* cmd = app.add_subcommand("synth", "Generate a synthetic CASIA-B-like dataset (silhouettes + pose CSV)");
  cmd->add_option("--out", a->opts.out, "Output folder (refused when not empty, unless --force)")->required();
  cmd->add_option("--subjects", a->opts.gen.subjects, "Number of subjects (CASIA-B: 124)");
  cmd->add_option("--seed", a->opts.gen.seed, "Random seed: the same seed gives the same dataset");
  cmd->add_option("--motion", a->motion, "cmu: captured people only; procedural: walkers drawn from the gait model; "
                                         "mixed: each captured person once, the rest drawn");
  cmd->add_option("--mocap", a->opts.mocap, "Folder of BVH or ASF/AMC walking clips (default: the embedded CMU clips)");
  cmd->add_flag("--small", a->small, fmt::format("CI/demo preset: {} subjects", kSmallSubjects));
  cmd->add_option("--views", a->views, "Camera views in degrees (default: 0,18,...,180)")->delimiter(',');
  cmd->add_option("--threads", a->opts.threads, "Worker threads (default: all cores)");
  cmd->add_flag("--force", a->opts.force, "Replace an earlier generator output in --out");
  cmd->add_flag("--no-progress", a->no_progress, "No progress bar");
  cmd->callback([a] { run_synth(*a); });
}

}  // namespace gait::cli
