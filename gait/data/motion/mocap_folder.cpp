#include "gait/motion/mocap_folder.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <sstream>

#include "common/check.hpp"
#include "common/files.hpp"
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

std::vector<fs::path> files_with(const fs::path& dir, const std::string& ext) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file(ec) && e.path().extension() == ext) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::vector<MotionClip> load_mocap_folder(const fs::path& dir, std::vector<std::string>& problems) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw common::Error(fmt::format("{}: no such motion-capture folder", dir.string()));
  const auto manifest = read_mocap_manifest(dir / "MANIFEST.tsv", problems);
  std::vector<fs::path> persons;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_directory(ec)) persons.push_back(e.path());
  std::sort(persons.begin(), persons.end());
  std::vector<MotionClip> clips;
  for (const auto& pdir : persons) {
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

}  // namespace gait
