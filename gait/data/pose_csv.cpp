#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>

#include "common/files.hpp"
#include "common/check.hpp"
#include "gait/pose.hpp"

namespace gait {

namespace fs = std::filesystem;

const std::array<std::string_view, kCocoJoints> kCocoJointNames = {
    "nose",          "left_eye",       "right_eye",  "left_ear",    "right_ear",   "left_shoulder",
    "right_shoulder", "left_elbow",    "right_elbow", "left_wrist", "right_wrist", "left_hip",
    "right_hip",     "left_knee",      "right_knee", "left_ankle",  "right_ankle"};
const std::array<int, kCocoJoints> kCocoMirror = {0, 2, 1, 4, 3, 6, 5, 8, 7, 10, 9, 12, 11, 14, 13, 16, 15};
const std::vector<std::pair<int, int>> kCocoBones = {
    {15, 13}, {13, 11}, {11, 5}, {16, 14}, {14, 12}, {12, 6}, {11, 12}, {5, 6}, {5, 7},
    {7, 9},   {6, 8},   {8, 10}, {3, 1},   {1, 0},   {0, 2},  {2, 4}};

namespace {

// At most this many messages per file; the counts carry the rest.
constexpr std::size_t kMaxNotesPerFile = 20;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= line.size(); ++i) {
    if (i == line.size() || line[i] == ',') {
      out.push_back(trim(line.substr(start, i - start)));
      start = i + 1;
    }
  }
  return out;
}

bool parse_float(std::string_view s, float& out) {
  if (s.empty()) return false;
  std::string tmp(s);  // strtof needs a terminated string; accepts "nan", "inf", exponents
  char* end = nullptr;
  out = std::strtof(tmp.c_str(), &end);
  return end == tmp.c_str() + tmp.size();
}

// "./001-nm-01-090/000045.jpg" or "001-nm-01-090/000045.jpg" -> key, frame.
bool parse_image_name(std::string_view name, SequenceKey& key, int& frame) {
  const auto slash = name.rfind('/');
  if (slash == std::string_view::npos) return false;
  const auto file = name.substr(slash + 1);
  auto dir = name.substr(0, slash);
  const auto slash2 = dir.rfind('/');
  if (slash2 != std::string_view::npos) dir = dir.substr(slash2 + 1);
  const auto k = parse_sequence_id(dir);
  if (!k) return false;
  const auto dot = file.rfind('.');
  const auto num = file.substr(0, dot);
  if (num.empty() || num.size() > 9) return false;
  int v = 0;
  auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), v);
  if (ec != std::errc() || p != num.data() + num.size() || v < 0) return false;
  key = *k;
  frame = v;
  return true;
}

}  // namespace

void PoseCsvReader::note(const std::string& source, std::size_t line, const std::string& what) {
  if (notes_this_file_++ < kMaxNotesPerFile) stats_.problems.push_back(fmt::format("{}:{}: {}", source, line, what));
}

void PoseCsvReader::add_file(const fs::path& path) {
  std::string text;
  try {
    text = common::read_file(path);
  } catch (const common::Error& e) {
    ++stats_.files;
    stats_.problems.push_back(e.what());
    return;
  }
  add_text(text, path.string());
}

void PoseCsvReader::add_text(std::string_view text, const std::string& source) {
  ++stats_.files;
  notes_this_file_ = 0;
  std::size_t lineno = 0, pos = 0;
  bool first = true;
  while (pos <= text.size()) {
    auto nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    const std::string_view line = trim(text.substr(pos, nl - pos));
    pos = nl + 1;
    ++lineno;
    if (line.empty()) {
      if (nl == text.size()) break;
      continue;
    }
    const auto fields = split(line);
    if (first) {
      first = false;
      if (fields[0] == "image_name") {
        if (fields.size() != static_cast<std::size_t>(kPoseCsvColumns))
          note(source, lineno, fmt::format("header has {} columns, expected {}", fields.size(), kPoseCsvColumns));
        continue;
      }
    }
    ++stats_.rows;
    if (fields.size() != static_cast<std::size_t>(kPoseCsvColumns)) {
      ++stats_.bad_field_count;
      note(source, lineno, fmt::format("{} fields, expected {}: row skipped", fields.size(), kPoseCsvColumns));
      continue;
    }
    SequenceKey key;
    int frame = 0;
    if (!parse_image_name(fields[0], key, frame)) {
      ++stats_.bad_name;
      note(source, lineno, fmt::format("image_name '{}' is not <sid>-<cond>-<nn>-<view>/<frame>: row skipped",
                                       std::string(fields[0].substr(0, 80))));
      continue;
    }
    RawRow row;
    int valid = 0;
    for (int j = 0; j < kCocoJoints; ++j) {
      RawJoint& r = row[j];
      const bool parsed = parse_float(fields[1 + 3 * j], r.x) && parse_float(fields[2 + 3 * j], r.y) &&
                          parse_float(fields[3 + 3 * j], r.conf);
      const bool finite = parsed && std::isfinite(r.x) && std::isfinite(r.y) && std::isfinite(r.conf);
      const bool in_frame = finite && r.x >= 0 && r.y >= 0 && r.x <= opts_.frame_width && r.y <= opts_.frame_height;
      const bool missing = finite && r.x == 0 && r.y == 0 && r.conf == 0;  // the "not detected" convention
      r.valid = in_frame && !missing && r.conf >= 0;
      if (r.valid) {
        r.conf = std::min(r.conf, 1.0f);  // heatmap peaks can exceed 1 slightly
        ++valid;
      }
    }
    if (valid == 0) {
      ++stats_.all_joints_invalid;
      note(source, lineno, "no valid joint: row skipped");
      continue;
    }
    auto& seq = rows_[key];
    if (!seq.emplace(frame, row).second) {
      ++stats_.duplicate;
      note(source, lineno, fmt::format("frame {} of {} repeated: row skipped", frame, sequence_id(key)));
    }
  }
  if (notes_this_file_ > kMaxNotesPerFile)
    stats_.problems.push_back(fmt::format("{}: {} more problems not shown", source, notes_this_file_ - kMaxNotesPerFile));
}

PoseTable PoseCsvReader::finish() {
  PoseTable out;
  for (auto& [key, rows] : rows_) {
    PoseSequence seq;
    std::vector<RawRow> raw;
    for (auto& [frame, row] : rows) {
      seq.frame_ids.push_back(frame);
      raw.push_back(row);
    }
    const std::size_t n = raw.size();
    seq.frames.resize(n);
    for (int j = 0; j < kCocoJoints; ++j) {
      for (std::size_t t = 0; t < n; ++t) {
        const RawJoint& r = raw[t][j];
        Keypoint& k = seq.frames[t][j];
        if (r.valid) {
          k = {r.x, r.y, r.conf};
          continue;
        }
        // Nearest valid neighbours of the same joint, by position in the sorted rows.
        std::ptrdiff_t a = static_cast<std::ptrdiff_t>(t) - 1, b = static_cast<std::ptrdiff_t>(t) + 1;
        while (a >= 0 && !raw[a][j].valid) --a;
        while (b < static_cast<std::ptrdiff_t>(n) && !raw[b][j].valid) ++b;
        const bool ha = a >= 0, hb = b < static_cast<std::ptrdiff_t>(n);
        if (!ha && !hb) {
          k = {0, 0, 0};
          ++stats_.joints_unrepairable;
          continue;
        }
        const RawJoint& ra = ha ? raw[a][j] : raw[b][j];
        const RawJoint& rb = hb ? raw[b][j] : raw[a][j];
        double w = 0;
        if (ha && hb) {
          const double fa = seq.frame_ids[a], fb = seq.frame_ids[b];
          w = (seq.frame_ids[t] - fa) / std::max(1.0, fb - fa);
        }
        k.x = static_cast<float>(ra.x + w * (rb.x - ra.x));
        k.y = static_cast<float>(ra.y + w * (rb.y - ra.y));
        k.conf = 0.5f * std::min(ra.conf, rb.conf);
        ++stats_.joints_repaired;
      }
    }
    stats_.rows_used += n;
    out.emplace(key, std::move(seq));
  }
  rows_.clear();
  return out;
}

PoseTable read_pose_path(const fs::path& path, PoseCsvStats& stats, PoseCsvOptions opts) {
  PoseCsvReader reader(opts);
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    std::vector<fs::path> files;
    for (auto it = fs::recursive_directory_iterator(path, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec))
      if (it->is_regular_file() && it->path().extension() == ".csv") files.push_back(it->path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) reader.add_file(f);
  } else {
    reader.add_file(path);
  }
  PoseTable t = reader.finish();
  stats = reader.stats();
  return t;
}

std::string pose_image_name(const SequenceKey& key, int frame) {
  return fmt::format("./{}/{:06d}.jpg", sequence_id(key), frame);
}

std::string pose_csv_header() {
  std::string h = "image_name";
  for (auto name : kCocoJointNames) h += fmt::format(",{0}_x,{0}_y,{0}_conf", name);
  return h + "\n";
}

std::string pose_csv_text(const SequenceKey& key, const PoseSequence& seq) {
  std::string out = pose_csv_header();
  for (std::size_t t = 0; t < seq.frames.size(); ++t) {
    out += pose_image_name(key, seq.frame_ids[t]);
    for (const Keypoint& k : seq.frames[t]) out += fmt::format(",{:.2f},{:.2f},{:.3f}", k.x, k.y, k.conf);
    out += '\n';
  }
  return out;
}

}  // namespace gait
