// `gait mocap [--mocap DIR]`: what the generator learns from a capture folder.
// `gait mocap-pack --from DIR --out DIR`: the compact copy embedded in the repository
// (gait/data/mocap): every clip re-sampled to a lower rate and rounded, BVH joints the
// retargeting does not use (fingers, eyes) dropped, AMC bones likewise.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "commands.hpp"
#include "common/check.hpp"
#include "common/files.hpp"
#include "common/validate.hpp"
#include "gait/motion/mocap_folder.hpp"
#include "gait/synth/gait_model.hpp"

namespace gait::cli {

namespace fs = std::filesystem;

namespace {

void run_info(const fs::path& dir) {
  std::vector<std::string> problems;
  for (const auto& clip : load_mocap_folder(dir, problems)) {
    try {
      const CanonMotion m = retarget_to_canonical(clip);
      CycleCutReport rep;
      const auto cycles = cut_gait_cycles(m, {}, &rep);
      double dur = 0;
      for (const auto& c : cycles) dur += c.duration_s;
      fmt::print("{:>8} {:>4} {:>8} {:5} frames {:5.0f} fps  leg {:6.2f} m  cycles {:2} (of {:2}; {} turning, {} not walking)  mean {:.2f} s{}\n",
                 clip.name, clip.person, clip.format, clip.frames.size(), clip.fps, m.leg_length * clip.metres_per_unit,
                 cycles.size(), rep.candidates, rep.turning, rep.not_walking, cycles.empty() ? 0.0 : dur / cycles.size(),
                 clip.first_frame_is_rest_pose ? "  (T-pose frame dropped)" : "");
    } catch (const common::Error& e) {
      problems.push_back(e.what());
    }
  }
  const MotionLibrary lib = build_motion_library(dir);
  fmt::print("\n{} clips, {} gait cycles from {} people; Fourier ({} harmonics) residual {:.4f} (unit directions)\n",
             lib.clips, lib.cycles, lib.cycles_per_person.size(), kHarmonics, lib.fourier_rms);
  fmt::print("PCA: {} components keep {:.1f}% of the person-weighted variance\n", lib.model.basis.size(),
             100 * lib.model.explained);
  double between = 0, within = 0;
  for (std::size_t c = 0; c < lib.model.sd.size(); ++c) {
    between += lib.model.sd[c] * lib.model.sd[c];
    within += lib.model.sd_within[c] * lib.model.sd_within[c];
  }
  fmt::print("walk-to-walk spread within a person: {:.1f}% of that variance, measured on the natural-pace cycles "
             "({} cycles of clips labelled with another pace left out)\n",
             between > 0 ? 100 * within / between : 0.0, lib.cycles_instructed);
  for (const auto& p : problems) fmt::print(stderr, "warning: {}\n", p);
}

void run_pack(const fs::path& from, const fs::path& out_dir, int step) {
  common::validate::folder(from, "--from");
  common::check_output_dir(out_dir, "mocap-pack: --out");
  std::vector<std::string> problems;
  const MocapPackSummary sum = pack_mocap_folder(from, out_dir, step, problems);
  for (const auto& p : problems) fmt::print(stderr, "warning: {}\n", p);
  fmt::print("wrote {} ({} clips, {:.2f} MB of motion)\n", out_dir.string(), sum.clips, sum.bytes / 1e6);
}

}  // namespace

void add_mocap_commands(CLI::App& app) {
  auto* info = app.add_subcommand("mocap", "Show the gait cycles and the statistical model learned from captures");
  auto* dir = new fs::path(default_mocap_dir());
  info->add_option("--mocap", *dir, "Folder of BVH or ASF/AMC walking clips (default: the embedded captures)")
      ->check(common::validate::existing_folder());
  info->callback([dir] { run_info(*dir); });

  auto* pack = app.add_subcommand("mocap-pack", "Write the compact embedded copy of a capture folder");
  auto* from = new fs::path, *out = new fs::path;
  auto* step = new int(3);
  pack->add_option("--from", *from, "Source folder (e.g. ../shared/data/cmu-walk)")->required();
  pack->add_option("--out", *out, "Output folder (e.g. gait/data/mocap)")->required();
  pack->add_option("--step", *step, "Keep every n-th frame (3: 120 -> 40 fps)")
      ->check(common::validate::range(1, 1000, "frames"));
  pack->callback([=] { run_pack(*from, *out, *step); });
}

}  // namespace gait::cli
