// gait synth --out DIR [--subjects 124] [--seed S] [--motion cmu|procedural|mixed]
//            [--mocap DIR] [--small] [--views 0,90,...] [--threads N] [--force]
#include <fmt/format.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/files.hpp"
#include "common/validate.hpp"

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
  std::filesystem::path results;  // docs/results/gait-data.json
  std::string command;
};

std::string first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

// The results file is shared: scripts/gait_results.py keeps the calibration table in it,
// so a new generation replaces only its own keys. A file that is there but is not a
// JSON object is refused (before the generation), not replaced.
nlohmann::json existing_results(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return nlohmann::json::object();
  nlohmann::json j = nlohmann::json::parse(common::read_file(path), nullptr, false);
  if (!j.is_object())
    throw common::Error(fmt::format("synth: --results {}: exists and is not a JSON object; not replacing it", path.string()));
  return j;
}

void write_results(const SynthArgs& a, const SynthReport& r, const std::string& load_at_start) {
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  const int threads = r.threads;
  nlohmann::json j = {{"date", date},
                      {"command", a.command},
                      {"full_generation_seconds", std::round(r.seconds * 10) / 10},
                      // CPU time / threads: the wall time the run would take with its threads
                      // on otherwise idle cores (the shared build machine is often busy).
                      {"cpu_seconds", std::round(r.cpu_seconds * 10) / 10},
                      {"cpu_seconds_per_thread", std::round(r.cpu_seconds / r.threads * 10) / 10},
                      {"subjects", a.opts.gen.subjects},
                      {"sequences", r.sequences},
                      {"frames", r.frames},
                      {"pose_rows", r.pose_rows},
                      {"joint_in_silhouette_fraction", std::round(r.joint_in_silhouette() * 10000) / 10000},
                      {"joints_checked", r.joints_checked},
                      {"mocap_subjects_used", r.mocap_persons_used.size()},
                      {"mocap_persons", r.mocap_persons_used},
                      {"mocap_gait_cycles", r.mocap_cycles},
                      {"motion", a.motion},
                      {"threads", threads},
                      {"machine", {{"cpus", std::thread::hardware_concurrency()}, {"cpu_model", cpu_model()},
                                   {"loadavg_at_start", load_at_start}, {"loadavg_at_end", first_line("/proc/loadavg")}}}};
  nlohmann::json out = existing_results(a.results);
  out.update(j);
  common::write_file_atomic(a.results, out.dump(2) + "\n");
}

void run_synth(SynthArgs& a) {
  const std::map<std::string, MotionSource> motions = {
      {"cmu", MotionSource::Cmu}, {"procedural", MotionSource::Procedural}, {"mixed", MotionSource::Mixed}};
  const auto m = motions.find(a.motion);
  XS_ASSERT(m != motions.end(), "--motion must be cmu, procedural or mixed (got '{}')", a.motion);
  a.opts.gen.motion = m->second;
  if (a.small) a.opts.gen.subjects = kSmallSubjects;
  if (!a.views.empty()) {
    common::validate::unique<int>(a.views, "--views");  // a repeated view would be rendered twice
    a.opts.gen.views = a.views;
  }
  a.opts.progress = !a.no_progress;
  // Before the generation: the results file must be writable then.
  if (!a.results.empty()) {
    common::check_output_path(a.results, "synth: --results");
    existing_results(a.results);
  }
  const std::string load = first_line("/proc/loadavg");
  const SynthReport r = synthesize(a.opts);
  if (!a.results.empty()) write_results(a, r, load);
  fmt::print("{}: {} sequences, {} silhouette frames, {} pose rows in {:.1f} s ({:.1f} CPU s on {} threads)\n",
             a.opts.out.string(), r.sequences, r.frames, r.pose_rows, r.seconds, r.cpu_seconds, r.threads);
  fmt::print("motion: {} ({} gait cycles of {} captured people); joints inside the silhouette: {:.2f}% of {} visible\n",
             a.motion, r.mocap_cycles, r.mocap_persons_used.size(), 100 * r.joint_in_silhouette(), r.joints_checked);
}
}  // namespace

void add_synth_command(CLI::App& app) {
  auto* a = new SynthArgs;
  auto* cmd = app.add_subcommand("synth", "Generate a synthetic CASIA-B-like dataset (silhouettes + pose CSV)");
  cmd->add_option("--out", a->opts.out, "Output folder (refused when not empty, unless --force)")
      ->required()
      ->check(common::validate::output_folder());
  cmd->add_option("--subjects", a->opts.gen.subjects, "Number of subjects (CASIA-B: 124)")
      ->check(common::validate::range(1, 999, "subjects"));
  cmd->add_option("--seed", a->opts.gen.seed, "Random seed: the same seed gives the same dataset");
  cmd->add_option("--motion", a->motion, "cmu: captured people only; procedural: walkers drawn from the gait model; "
                                         "mixed: each captured person once, the rest drawn");
  cmd->add_option("--mocap", a->opts.mocap, "Folder of BVH or ASF/AMC walking clips (default: the embedded CMU clips)")
      ->check(common::validate::existing_folder());
  cmd->add_flag("--small", a->small, fmt::format("CI/demo preset: {} subjects", kSmallSubjects));
  cmd->add_option("--views", a->views, "Camera views in degrees (default: 0,18,...,180)")
      ->delimiter(',')
      ->check(common::validate::range(0, 180, "degrees"));
  cmd->add_option("--threads", a->opts.threads, "Worker threads (default 0: all cores)")
      ->check(common::validate::min(0, "threads", "0: all cores"));
  cmd->add_flag("--force", a->opts.force, "Replace an earlier generator output in --out");
  cmd->add_flag("--no-progress", a->no_progress, "No progress bar");
  cmd->add_option("--results", a->results, "Also write the headline figures as JSON (docs/results/gait-data.json)")
      ->check(common::validate::output_file());
  cmd->callback([a] {
    // The command line as typed (Linux), for the results file.
    std::ifstream in("/proc/self/cmdline", std::ios::binary);
    std::string arg;
    a->command = "gait";
    for (bool first = true; std::getline(in, arg, '\0'); first = false)
      if (!first) a->command += " " + arg;
    run_synth(*a);
  });
}

}  // namespace gait::cli
