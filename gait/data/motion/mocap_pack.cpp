// pack_mocap_folder: the compact copy of a capture folder that the repository embeds.
#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "common/check.hpp"
#include "common/files.hpp"
#include "common/validate.hpp"
#include "gait/motion/asf_amc.hpp"
#include "gait/motion/bvh.hpp"
#include "gait/motion/mocap_folder.hpp"

namespace gait {

namespace fs = std::filesystem;

namespace {

// One source file as packed: ASF skeletons are copied (no format, no frames).
struct PackedFile {
  std::string text, format;
  std::size_t frames = 0, source_frames = 0;
  double fps = 0, source_fps = 0;
};

// The bones the retargeting reads and their ancestors; fingers, hands and toes go.
const std::vector<std::string>& amc_bones_kept() {
  static const std::vector<std::string> bones = {
      "root",     "lowerback", "upperback", "thorax",    "lowerneck", "upperneck", "head",
      "lclavicle", "lhumerus", "lradius",   "rclavicle", "rhumerus",  "rradius",   "lfemur",
      "ltibia",   "lfoot",     "rfemur",    "rtibia",    "rfoot"};
  return bones;
}

PackedFile pack_amc(const fs::path& f, double source_fps, int step) {
  const AmcFile amc = read_amc_file(f);
  AmcFile sub;
  sub.header = amc.header;
  for (std::size_t i = 0; i < amc.frames.size(); i += static_cast<std::size_t>(step))
    sub.frames.push_back(amc.frames[i]);
  return {write_amc(sub, amc_bones_kept(), 1, 2), "asf-amc", sub.frames.size(), amc.frames.size(), source_fps / step,
          source_fps};
}

// The converter's T-pose stays as frame 1, so the packed file is a faithful subset.
PackedFile pack_bvh(const fs::path& f, int step) {
  const BvhFile bvh = read_bvh_file(f);
  const BvhFile t = trim_bvh(bvh, step);
  return {write_bvh(t, 1, 2), "bvh-cgspeed-daz", t.frames.size(), bvh.frames.size(), 1.0 / t.frame_time,
          1.0 / bvh.frame_time};
}

// Null for files that are not motion capture (README, licences).
std::optional<PackedFile> pack_file(const fs::path& f, const std::map<std::string, MocapManifestRow>& source_manifest,
                                    const std::string& key, int step) {
  const std::string ext = f.extension().string();
  if (ext == ".asf") return PackedFile{common::read_file(f), "", 0, 0, 0, 0};
  if (ext == ".bvh") return pack_bvh(f, step);
  if (ext != ".amc") return std::nullopt;
  // AMC carries no rate: the source MANIFEST's, else CMU's (as load_mocap_folder reads it).
  const auto row = source_manifest.find(key);
  const double fps = row != source_manifest.end() && row->second.fps > 0 ? row->second.fps : kCmuCaptureFps;
  return pack_amc(f, fps, step);
}

std::vector<fs::path> sorted_entries(const fs::path& dir, bool folders) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() == folders) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

MocapPackSummary pack_mocap_folder(const fs::path& from, const fs::path& out_dir, int step,
                                   std::vector<std::string>& problems) {
  if (step < 1) throw common::Error(fmt::format("mocap pack: step {} (keep every n-th frame, n >= 1)", step));
  common::validate::folder(from, "mocap pack: the capture folder");
  common::check_output_dir(out_dir, "mocap pack: the output folder");
  const auto absolute = [](const fs::path& p) {  // without a trailing separator's empty element
    const fs::path a = fs::weakly_canonical(p);
    return a.has_filename() ? a : a.parent_path();
  };
  const fs::path src = absolute(from), dst = absolute(out_dir);
  const auto inside = [](const fs::path& a, const fs::path& b) {  // a is b or below it
    return std::mismatch(a.begin(), a.end(), b.begin(), b.end()).second == b.end();
  };
  if (inside(dst, src) || inside(src, dst))
    throw common::Error(fmt::format("mocap pack: the output folder {} and the capture folder {} overlap",
                                    out_dir.string(), from.string()));
  // The packed copy replaces the files of an earlier one only when every clip was read.
  common::OutputStage stage(out_dir);
  // The source's own labels ("walk", "slow walk") travel with the clips: the gait model
  // measures a person's walk-to-walk spread on their natural-pace clips only.
  const auto source_manifest = read_mocap_manifest(from / "MANIFEST.tsv", problems);
  std::string manifest = "subject\ttrial\tfile\tformat\tframes\tfps\tsource_frames\tsource_fps\tdescription\n";
  MocapPackSummary sum;
  for (const auto& pdir : sorted_entries(from, true)) {
    const std::string person = pdir.filename().string();
    for (const auto& f : sorted_entries(pdir, false)) {
      const std::string key = person + "/" + f.filename().string();
      const auto packed = pack_file(f, source_manifest, key, step);
      if (!packed) continue;
      common::write_file_atomic(stage.dir() / person / f.filename(), packed->text);
      sum.bytes += packed->text.size();
      if (packed->format.empty()) continue;
      ++sum.clips;
      const std::string stem = f.stem().string();
      const std::string trial = stem.substr(stem.find('_') + 1);
      const auto src = source_manifest.find(key);
      manifest += fmt::format("{}\t{}\t{}\t{}\t{}\t{:g}\t{}\t{:g}\t{}\n", person, trial, key, packed->format,
                              packed->frames, packed->fps, packed->source_frames, packed->source_fps,
                              src == source_manifest.end() ? "" : src->second.description);
    }
  }
  common::write_file_atomic(stage.dir() / "MANIFEST.tsv", manifest);
  stage.commit();
  return sum;
}

}  // namespace gait
