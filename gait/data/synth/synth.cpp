#include "gait/synth/synth.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sys/resource.h>

#include "common/check.hpp"
#include "common/files.hpp"
#include "common/validate.hpp"
#include "common/parallel.hpp"
#include "common/png_fast.hpp"
#include "common/progress.hpp"
#include "gait/motion/mocap_folder.hpp"

namespace gait {

namespace fs = std::filesystem;

namespace {

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

void write_bytes(const fs::path& path, const void* data, std::size_t n) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw common::Error(fmt::format("{}: cannot open for writing", path.string()));
  const bool ok = std::fwrite(data, 1, n, f) == n;
  if (std::fclose(f) != 0 || !ok) throw common::Error(fmt::format("{}: write failed (disk full?)", path.string()));
}

// Refuses options that would generate nothing or twice the same, and an output the
// generator must not write into; writes nothing itself.
void check_options(const SynthOptions& opts) {
  XS_ASSERT(!opts.out.empty(), "--out is required");
  XS_ASSERT(opts.gen.subjects >= 1, "--subjects {}: at least one subject is needed", opts.gen.subjects);
  XS_ASSERT(!opts.gen.views.empty(), "--views: at least one view is needed");
  common::validate::unique<int>(opts.gen.views, "--views");
  const fs::path& out = opts.out;
  std::error_code ec;
  if (!fs::exists(out, ec)) return;
  if (!fs::is_directory(out, ec)) throw common::Error(fmt::format("{}: exists and is not a folder", out.string()));
  if (!fs::is_empty(out, ec) && !opts.force)
    throw common::Error(
        fmt::format("{}: folder is not empty; use --force to replace the generator's output in it", out.string()));
}

nlohmann::json subject_plans_json(const Generator& gen) {
  nlohmann::json subjects = nlohmann::json::array();
  for (const auto& p : gen.plans())
    subjects.push_back({{"id", p.subject}, {"motion", p.motion}, {"height_m", p.body.height},
                        {"girth", p.body.girth}, {"bag", p.body.bag == BagStyle::Shoulder ? "shoulder"
                                                          : p.body.bag == BagStyle::Hand ? "hand" : "backpack"},
                        {"bag_side", p.body.bag_side > 0 ? "right" : "left"}, {"bag_lean_deg", p.body.bag_lean_deg}});
  return subjects;
}

struct Job {
  int subject;
  Condition cond;
  int seq;
};

struct JobRecord {
  std::vector<std::array<std::size_t, 2>> counts;  // per view: silhouette frames, pose rows
};

// synth.json: what was generated, from what, and each sequence's frame and pose-row counts.
nlohmann::json synth_manifest(const SynthOptions& opts, const fs::path& mocap, const MotionLibrary& lib,
                              const Generator& gen, const std::vector<Job>& jobs, const std::vector<JobRecord>& records,
                              const SynthReport& rep) {
  const auto& g = opts.gen;
  nlohmann::json j;
  j["generator"] = "gait synth";
  j["format_version"] = 1;
  j["seed"] = g.seed;
  j["subjects"] = g.subjects;
  j["motion"] = motion_source_name(g.motion);
  j["mocap_dir"] = fs::absolute(mocap).string();
  j["mocap_persons"] = rep.mocap_persons_used;
  j["mocap_cycles"] = lib.cycles;
  j["views"] = g.views;
  j["fps"] = kVideoFps;
  j["camera"] = {{"distance_m", g.rig.distance}, {"height_m", g.rig.height}, {"focal_px", g.rig.focal},
                 {"width", g.rig.width}, {"height", g.rig.height_px}};
  const EstimatorParams& e = g.estimator;
  j["calibration"] = {{"sequence_spread", kSequenceSpread}, {"spread_excludes_instructed_pace_cycles", lib.cycles_instructed},
                      {"cover_pull", e.cover_pull},
                      {"cover_leg_swap", e.cover_leg_swap}, {"swap_prob", e.swap_prob}, {"camo_prob", g.camo_prob}};
  j["subject_plans"] = subject_plans_json(gen);
  nlohmann::json seqs = nlohmann::json::object();
  for (std::size_t i = 0; i < jobs.size(); ++i)
    for (std::size_t v = 0; v < g.views.size(); ++v) {
      const SequenceKey key{jobs[i].subject, jobs[i].cond, jobs[i].seq, g.views[v]};
      seqs[sequence_id(key)] = {records[i].counts[v][0], records[i].counts[v][1]};
    }
  j["sequences"] = seqs;  // id -> [silhouette frames, pose rows]
  j["totals"] = {{"sequences", rep.sequences}, {"frames", rep.frames}, {"pose_rows", rep.pose_rows},
                 {"joint_in_silhouette_fraction", rep.joint_in_silhouette()}, {"seconds", rep.seconds},
                 {"cpu_seconds", rep.cpu_seconds},
                 {"threads", rep.threads}};
  return j;
}

}  // namespace

SynthReport synthesize(const SynthOptions& opts) {
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = cpu_seconds();
  check_options(opts);
  const fs::path mocap = opts.mocap.empty() ? default_mocap_dir() : opts.mocap;
  const MotionLibrary lib = build_motion_library(mocap);
  // Everything is generated into a stage that replaces the generator's own outputs
  // (silhouettes/, pose/, synth.json) only once the whole dataset is written.
  common::OutputStage stage(opts.out, common::OutputStage::Mode::replace);
  const fs::path& out = stage.dir();
  const Generator gen(opts.gen, lib.model);
  const auto& g = opts.gen;
  std::vector<Job> jobs;
  for (int s = 1; s <= g.subjects; ++s)
    for (auto [c, n] : g.sequences) jobs.push_back({s, c, n});
  std::vector<JobRecord> records(jobs.size());
  SynthReport rep;
  std::mutex mu;
  common::ProgressBar bar("synth", jobs.size() * g.views.size(), opts.progress);
  const int threads = common::worker_count(opts.threads, jobs.size());
  try {
    common::parallel_for(jobs.size(), threads, [&](std::size_t i) {
      const Job& job = jobs[i];
      try {
        std::size_t checked = 0, inside = 0, frames = 0, rows = 0;
        gen.render(job.subject, job.cond, job.seq, [&](ViewRender&& v) {
          const fs::path dir = out / "silhouettes" / subject_name(v.key.subject) / seq_dir_name(v.key) / view_name(v.key.view);
          fs::create_directories(dir);
          for (std::size_t f = 0; f < v.sil.size(); ++f) {
            const auto png = common::encode_png_fast(v.sil[f]);
            write_bytes(dir / frame_file_name(v.key, v.sil_frames[f]), png.data(), png.size());
          }
          const fs::path csv = out / "pose" / subject_name(v.key.subject) / (sequence_id(v.key) + ".csv");
          fs::create_directories(csv.parent_path());
          const std::string text = pose_csv_text(v.key, v.pose);
          write_bytes(csv, text.data(), text.size());
          records[i].counts.push_back({v.sil.size(), v.pose.frames.size()});
          checked += v.joints_checked;
          inside += v.joints_inside;
          frames += v.sil.size();
          rows += v.pose.frames.size();
          bar.tick();
        });
        std::lock_guard lock(mu);
        rep.sequences += g.views.size();
        rep.frames += frames;
        rep.pose_rows += rows;
        rep.joints_checked += checked;
        rep.joints_inside += inside;
      } catch (const std::exception& e) {
        throw common::Error(e.what());  // the first failure stops the rest (parallel_for)
      }
    });
  } catch (...) {
    bar.finish();
    throw;
  }
  bar.finish();

  rep.mocap_persons_used = lib.model.persons();
  rep.mocap_cycles = lib.cycles;
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  rep.cpu_seconds = cpu_seconds() - cpu_start;
  rep.threads = threads;

  common::write_file_atomic(out / "synth.json", synth_manifest(opts, mocap, lib, gen, jobs, records, rep).dump(1));
  stage.commit();
  return rep;
}

}  // namespace gait
