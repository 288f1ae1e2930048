#include "gait/motion/mocap_folder.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>

#include "common/check.hpp"
#include "common/files.hpp"
#include "common/validate.hpp"
#include "gait/motion/asf_amc.hpp"
#include "gait/motion/bvh.hpp"

#ifndef GAIT_SOURCE_MOCAP_DIR
#define GAIT_SOURCE_MOCAP_DIR ""
#endif

namespace gait {

namespace fs = std::filesystem;

fs::path default_mocap_dir() {
  if (const char* env = std::getenv("GAIT_MOCAP_DIR"); env && *env) return env;
  return GAIT_SOURCE_MOCAP_DIR;
}

// Tab-separated with a header naming the columns.
std::map<std::string, MocapManifestRow> read_mocap_manifest(const fs::path& path, std::vector<std::string>& problems) {
  std::map<std::string, MocapManifestRow> rows;
  std::error_code ec;
  if (!fs::exists(path, ec)) return rows;
  std::istringstream in(common::read_file(path));
  std::string line;
  std::vector<std::string> header;
  std::size_t lineno = 0;
  auto split = [](const std::string& l) {
    std::vector<std::string> f;
    std::string cur;
    for (char c : l) {
      if (c == '\t') {
        f.push_back(cur);
        cur.clear();
      } else if (c != '\r') {
        cur.push_back(c);
      }
    }
    f.push_back(cur);
    return f;
  };
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    const auto f = split(line);
    if (header.empty()) {
      header = f;
      continue;
    }
    if (f.size() != header.size()) {
      problems.push_back(fmt::format("{}:{}: {} fields, header has {}: ignored", path.string(), lineno, f.size(), header.size()));
      continue;
    }
    std::string file;
    MocapManifestRow r;
    for (std::size_t i = 0; i < f.size(); ++i) {
      if (header[i] == "file") file = f[i];
      if (header[i] == "format") r.format = f[i];
      if (header[i] == "description") r.description = f[i];
      if (header[i] == "fps") r.fps = std::atof(f[i].c_str());
    }
    if (!file.empty()) rows[file] = r;
  }
  return rows;
}

namespace {

// The regular files of `dir` with extension `ext` (empty: all), sorted.
std::vector<fs::path> files_with(const fs::path& dir, const std::string& ext) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file(ec) && (ext.empty() || e.path().extension() == ext)) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}


// ---- the compact copy (pack_mocap_folder) ----

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

}  // namespace

std::vector<MotionClip> load_mocap_folder(const fs::path& dir, std::vector<std::string>& problems) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw common::Error(fmt::format("{}: no such motion-capture folder", dir.string()));
  const auto manifest = read_mocap_manifest(dir / "MANIFEST.tsv", problems);
  std::vector<MotionClip> clips;
  for (const auto& pdir : common::sorted_subfolders(dir)) {
    const std::string person = pdir.filename().string();
    auto entry = [&](const fs::path& f) -> const MocapManifestRow* {
      auto it = manifest.find(person + "/" + f.filename().string());
      return it == manifest.end() ? nullptr : &it->second;
    };
    const auto amcs = files_with(pdir, ".amc");
    if (!amcs.empty()) {
      auto asfs = files_with(pdir, ".asf");
      if (asfs.empty()) {
        problems.push_back(fmt::format("{}: AMC files but no .asf skeleton: skipped", pdir.string()));
      } else {
        // Prefer "<person>.asf" when a folder holds several skeletons.
        auto it = std::find_if(asfs.begin(), asfs.end(), [&](const fs::path& p) { return p.stem() == person; });
        const fs::path asf_path = it != asfs.end() ? *it : asfs.front();
        try {
          const AsfSkeleton asf = read_asf_file(asf_path);
          for (const auto& f : amcs) {
            try {
              const MocapManifestRow* m = entry(f);
              const double fps = m && m->fps > 0 ? m->fps : kCmuCaptureFps;
              clips.push_back(amc_to_clip(asf, read_amc_file(f), fps, f.stem().string(), person));
              if (m) clips.back().description = m->description;
            } catch (const common::Error& e) {
              problems.push_back(fmt::format("{} (skipped)", e.what()));
            }
          }
        } catch (const common::Error& e) {
          problems.push_back(fmt::format("{} (person {} skipped)", e.what(), person));
        }
      }
    }
    for (const auto& f : files_with(pdir, ".bvh")) {
      try {
        MotionClip c = bvh_to_clip(read_bvh_file(f), f.stem().string(), person);
        const MocapManifestRow* m = entry(f);
        if (m && m->format == "bvh-cgspeed-daz") c.first_frame_is_rest_pose = true;
        if (m) c.description = m->description;
        clips.push_back(std::move(c));
      } catch (const common::Error& e) {
        problems.push_back(fmt::format("{} (skipped)", e.what()));
      }
    }
  }
  return clips;
}

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
  for (const auto& pdir : common::sorted_subfolders(from)) {
    const std::string person = pdir.filename().string();
    for (const auto& f : files_with(pdir, "")) {
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
