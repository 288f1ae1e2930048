// `gait mocap [--mocap DIR]`: what the generator learns from a capture folder.
// `gait mocap-pack --from DIR --out DIR`: the compact copy embedded in the repository
// (gait/data/mocap): every clip re-sampled to a lower rate and rounded, BVH joints the
// retargeting does not use (fingers, eyes) dropped, AMC bones likewise.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "commands.hpp"
#include "common/check.hpp"
#include "common/files.hpp"
#include "common/validate.hpp"
#include "gait/motion/asf_amc.hpp"
#include "gait/motion/bvh.hpp"
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

// Joints the retargeting reads, and their ancestors; everything else is dropped from BVH.
bool keep_bvh_joint(const BvhFile& b, std::size_t j) {
  static const std::set<std::string> unused_prefixes = {"leftEye", "rightEye", "lThumb", "rThumb", "lIndex",
                                                        "rIndex",  "lMid",     "rMid",   "lRing",  "rRing",
                                                        "lPinky",  "rPinky"};
  for (int k = static_cast<int>(j); k >= 0; k = b.joints[k].parent)
    for (const auto& p : unused_prefixes)
      if (b.joints[k].name.rfind(p, 0) == 0) return false;
  return true;
}

BvhFile trim_bvh(const BvhFile& in, int step) {
  BvhFile out;
  out.frame_time = in.frame_time * step;
  std::vector<int> map(in.joints.size(), -1);
  std::vector<std::pair<int, int>> channel_src;  // (old first channel, count)
  for (std::size_t j = 0; j < in.joints.size(); ++j) {
    if (!keep_bvh_joint(in, j)) continue;
    BvhJoint nj = in.joints[j];
    nj.parent = nj.parent < 0 ? -1 : map[nj.parent];
    nj.first_channel = out.channels;
    out.channels += static_cast<int>(nj.channels.size());
    channel_src.emplace_back(in.joints[j].first_channel, static_cast<int>(nj.channels.size()));
    map[j] = static_cast<int>(out.joints.size());
    out.joints.push_back(nj);
  }
  // A joint that lost all its children gets an End Site at its first dropped child's offset.
  for (std::size_t j = 0; j < in.joints.size(); ++j) {
    if (map[j] < 0 || in.joints[j].end_site) continue;
    bool has_child = false;
    const BvhJoint* dropped = nullptr;
    for (std::size_t c = 0; c < in.joints.size(); ++c)
      if (in.joints[c].parent == static_cast<int>(j)) {
        if (map[c] >= 0) has_child = true;
        else if (!dropped) dropped = &in.joints[c];
      }
    if (!has_child && dropped) {
      BvhJoint end;
      end.name = in.joints[j].name + "_end";
      end.parent = map[j];
      end.offset = dropped->offset;
      end.end_site = true;
      end.first_channel = out.channels;
      out.joints.push_back(end);
    }
  }
  for (std::size_t f = 0; f < in.frames.size(); f += static_cast<std::size_t>(step)) {
    std::vector<double> v;
    for (auto [first, n] : channel_src)
      for (int c = 0; c < n; ++c) v.push_back(in.frames[f][first + c]);
    out.frames.push_back(std::move(v));
  }
  return out;
}

void run_pack(const fs::path& from, const fs::path& out_dir, int step) {
  common::validate::folder(from, "--from");
  common::check_output_dir(out_dir, "mocap-pack: --out");
  // The packed copy replaces the files of an earlier one only when every clip was read.
  common::OutputStage stage(out_dir);
  const fs::path& out = stage.dir();
  // Bones the retargeting reads (and their ancestors); fingers, hands and toes go.
  const std::vector<std::string> amc_bones = {"root", "lowerback", "upperback", "thorax", "lowerneck", "upperneck",
                                              "head", "lclavicle", "lhumerus", "lradius", "rclavicle", "rhumerus",
                                              "rradius", "lfemur", "ltibia", "lfoot", "rfemur", "rtibia", "rfoot"};
  // The source's own labels ("walk", "slow walk") travel with the clips: the gait model
  // measures a person's walk-to-walk spread on their natural-pace clips only.
  std::vector<std::string> manifest_problems;
  const auto source_manifest = read_mocap_manifest(from / "MANIFEST.tsv", manifest_problems);
  for (const auto& p : manifest_problems) fmt::print(stderr, "warning: {}\n", p);
  std::string manifest = "subject\ttrial\tfile\tformat\tframes\tfps\tsource_frames\tsource_fps\tdescription\n";
  std::vector<fs::path> persons;
  for (const auto& e : fs::directory_iterator(from))
    if (e.is_directory()) persons.push_back(e.path());
  std::sort(persons.begin(), persons.end());
  std::size_t bytes = 0;
  for (const auto& pdir : persons) {
    const std::string person = pdir.filename().string();
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(pdir)) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      const std::string ext = f.extension().string(), stem = f.stem().string();
      const std::string trial = stem.substr(stem.find('_') + 1);
      std::string text, format;
      std::size_t frames = 0, src_frames = 0;
      double fps = 0, src_fps = 0;
      if (ext == ".asf") {
        text = common::read_file(f);
      } else if (ext == ".amc") {
        AmcFile amc = read_amc_file(f);
        src_frames = amc.frames.size();
        src_fps = kCmuCaptureFps;
        AmcFile sub;
        sub.header = amc.header;
        for (std::size_t i = 0; i < amc.frames.size(); i += static_cast<std::size_t>(step)) sub.frames.push_back(amc.frames[i]);
        text = write_amc(sub, amc_bones, 1, 2);
        frames = sub.frames.size();
        fps = src_fps / step;
        format = "asf-amc";
      } else if (ext == ".bvh") {
        const BvhFile bvh = read_bvh_file(f);
        src_frames = bvh.frames.size();
        src_fps = 1.0 / bvh.frame_time;
        // Keep the converter's T-pose as frame 1 so the packed file stays a faithful subset.
        const BvhFile t = trim_bvh(bvh, step);
        text = write_bvh(t, 1, 2);
        frames = t.frames.size();
        fps = 1.0 / t.frame_time;
        format = "bvh-cgspeed-daz";
      } else {
        continue;
      }
      common::write_file_atomic(out / person / f.filename(), text);
      bytes += text.size();
      if (!format.empty()) {
        const auto src = source_manifest.find(person + "/" + f.filename().string());
        const std::string description = src == source_manifest.end() ? "" : src->second.description;
        manifest += fmt::format("{}\t{}\t{}/{}\t{}\t{}\t{:g}\t{}\t{:g}\t{}\n", person, trial, person,
                                f.filename().string(), format, frames, fps, src_frames, src_fps, description);
      }
    }
  }
  common::write_file_atomic(out / "MANIFEST.tsv", manifest);
  stage.commit();
  fmt::print("wrote {} ({:.2f} MB of motion)\n", out_dir.string(), bytes / 1e6);
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
