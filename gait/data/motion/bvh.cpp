#include "gait/motion/bvh.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "common/check.hpp"
#include "common/files.hpp"
#include "text_tokens.hpp"

namespace gait {

using detail::Token;
using detail::Tokens;

namespace {

bool valid_channel(std::string_view c) {
  return c == "Xposition" || c == "Yposition" || c == "Zposition" || c == "Xrotation" || c == "Yrotation" ||
         c == "Zrotation";
}

// Parses "{ OFFSET .. CHANNELS .. children }" for joint `self`.
void parse_joint_body(Tokens& tk, BvhFile& bvh, int self) {
  tk.expect("{");
  tk.expect("OFFSET");
  bvh.joints[self].offset = {tk.number(), tk.number(), tk.number()};
  if (!bvh.joints[self].end_site) {
    tk.expect("CHANNELS");
    const Token count = tk.peek();
    const int n = tk.integer();
    if (n > 6) tk.fail(count, "more than 6 channels");
    bvh.joints[self].first_channel = bvh.channels;
    for (int i = 0; i < n; ++i) {
      const Token c = tk.next();
      if (!valid_channel(c.text)) tk.fail(c, fmt::format("unknown channel '{}'", c.text));
      bvh.joints[self].channels.emplace_back(c.text);
    }
    bvh.channels += n;
  }
  for (;;) {
    const Token t = tk.next();
    if (t.text == "}") return;
    if (bvh.joints[self].end_site) tk.fail(t, "End Site cannot have children");
    BvhJoint child;
    child.parent = self;
    if (t.text == "JOINT") {
      child.name = std::string(tk.next().text);
    } else if (t.text == "End") {
      tk.expect("Site");
      child.name = bvh.joints[self].name + "_end";
      child.end_site = true;
    } else {
      tk.fail(t, fmt::format("expected JOINT, End Site or '}}', found '{}'", t.text));
    }
    bvh.joints.push_back(child);
    parse_joint_body(tk, bvh, static_cast<int>(bvh.joints.size()) - 1);
  }
}

}  // namespace

BvhFile parse_bvh(const std::string& text, const std::string& source) {
  Tokens tk(text, source);
  BvhFile bvh;
  tk.expect("HIERARCHY");
  tk.expect("ROOT");
  BvhJoint root;
  root.name = std::string(tk.next().text);
  bvh.joints.push_back(root);
  parse_joint_body(tk, bvh, 0);
  tk.expect("MOTION");
  tk.expect("Frames:");
  const int frames = tk.integer();
  tk.expect("Frame");
  tk.expect("Time:");
  const Token ft = tk.peek();
  bvh.frame_time = tk.number();
  if (bvh.frame_time <= 0 || bvh.frame_time > 1) tk.fail(ft, fmt::format("implausible frame time {}", bvh.frame_time));
  bvh.frames.reserve(static_cast<std::size_t>(frames));
  for (int f = 0; f < frames; ++f) {
    if (tk.done())
      throw common::Error(fmt::format("{}: {} frames announced, {} present (truncated?)", source, frames, f));
    const std::size_t line = tk.peek().line;
    std::vector<double> values(static_cast<std::size_t>(bvh.channels));
    for (int c = 0; c < bvh.channels; ++c) {
      if (tk.done() || tk.peek().line != line)
        throw common::Error(fmt::format("{}:{}: frame {} has {} values, expected {}", source, line, f + 1, c, bvh.channels));
      values[c] = tk.number();
    }
    if (!tk.done() && tk.peek().line == line)
      tk.fail(tk.peek(), fmt::format("frame {} has more than {} values", f + 1, bvh.channels));
    bvh.frames.push_back(std::move(values));
  }
  if (!tk.done()) tk.fail(tk.peek(), fmt::format("data after the {} announced frames", frames));
  return bvh;
}

BvhFile read_bvh_file(const std::filesystem::path& path) { return parse_bvh(common::read_file(path), path.string()); }

namespace {
// Joints the retargeting reads, and their ancestors, stay; fingers and eyes (and all
// below them) go.
bool read_by_retargeting(const BvhFile& b, std::size_t j) {
  static const std::set<std::string> unused_prefixes = {"leftEye", "rightEye", "lThumb", "rThumb", "lIndex",
                                                        "rIndex",  "lMid",     "rMid",   "lRing",  "rRing",
                                                        "lPinky",  "rPinky"};
  for (int k = static_cast<int>(j); k >= 0; k = b.joints[static_cast<std::size_t>(k)].parent)
    for (const auto& p : unused_prefixes)
      if (b.joints[static_cast<std::size_t>(k)].name.rfind(p, 0) == 0) return false;
  return true;
}

// The first joint below `j` that the trim drops, or null.
const BvhJoint* dropped_child(const BvhFile& in, std::size_t j, const std::vector<int>& kept) {
  for (std::size_t c = j + 1; c < in.joints.size(); ++c)
    if (in.joints[c].parent == static_cast<int>(j) && kept[c] < 0) return &in.joints[c];
  return nullptr;
}

bool has_kept_child(const BvhFile& in, std::size_t j, const std::vector<int>& kept) {
  for (std::size_t c = j + 1; c < in.joints.size(); ++c)
    if (in.joints[c].parent == static_cast<int>(j) && kept[c] >= 0) return true;
  return false;
}
}  // namespace

BvhFile trim_bvh(const BvhFile& in, int step) {
  if (step < 1) throw common::Error(fmt::format("trim_bvh: step {} (keep every n-th frame, n >= 1)", step));
  BvhFile out;
  out.frame_time = in.frame_time * step;
  std::vector<int> kept(in.joints.size(), -1);
  for (std::size_t j = 0; j < in.joints.size(); ++j) kept[j] = read_by_retargeting(in, j) ? 0 : -1;
  std::vector<std::pair<int, int>> channel_src;  // (first channel in `in`, count) per kept joint
  for (std::size_t j = 0; j < in.joints.size(); ++j) {
    if (kept[j] < 0) continue;
    BvhJoint nj = in.joints[j];
    nj.parent = nj.parent < 0 ? -1 : kept[static_cast<std::size_t>(nj.parent)];
    nj.first_channel = out.channels;
    out.channels += static_cast<int>(nj.channels.size());
    channel_src.emplace_back(in.joints[j].first_channel, static_cast<int>(nj.channels.size()));
    kept[j] = static_cast<int>(out.joints.size());
    out.joints.push_back(nj);
    // A joint whose children all went ends in an End Site at its first child's offset,
    // so its bone keeps its length; the End Site follows it at once (depth-first order).
    const BvhJoint* gone = in.joints[j].end_site || has_kept_child(in, j, kept) ? nullptr : dropped_child(in, j, kept);
    if (gone) {
      BvhJoint end;
      end.name = in.joints[j].name + "_end";
      end.parent = kept[j];
      end.offset = gone->offset;
      end.end_site = true;
      end.first_channel = out.channels;
      out.joints.push_back(end);
    }
  }
  for (std::size_t f = 0; f < in.frames.size(); f += static_cast<std::size_t>(step)) {
    std::vector<double> v;
    v.reserve(static_cast<std::size_t>(out.channels));
    for (auto [first, n] : channel_src)
      for (int c = 0; c < n; ++c) v.push_back(in.frames[f][static_cast<std::size_t>(first + c)]);
    out.frames.push_back(std::move(v));
  }
  return out;
}

namespace {
std::string fixed(double v, int decimals) {
  std::string s = fmt::format("{:.{}f}", v, decimals);
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  if (s == "-0") s = "0";
  return s;
}

void write_joint(const BvhFile& bvh, int j, int depth, std::string& out) {
  const BvhJoint& jt = bvh.joints[j];
  const std::string ind(static_cast<std::size_t>(depth) * 2, ' ');
  if (jt.parent < 0) out += "ROOT " + jt.name + "\n";
  else if (jt.end_site) out += ind + "End Site\n";
  else out += ind + "JOINT " + jt.name + "\n";
  out += ind + "{\n";
  out += fmt::format("{}  OFFSET {} {} {}\n", ind, fixed(jt.offset.x, 4), fixed(jt.offset.y, 4), fixed(jt.offset.z, 4));
  if (!jt.end_site) {
    out += fmt::format("{}  CHANNELS {}", ind, jt.channels.size());
    for (const auto& c : jt.channels) out += " " + c;
    out += "\n";
  }
  for (std::size_t c = 0; c < bvh.joints.size(); ++c)
    if (bvh.joints[c].parent == j) write_joint(bvh, static_cast<int>(c), depth + 1, out);
  out += ind + "}\n";
}
}  // namespace

std::string write_bvh(const BvhFile& bvh, int dec_rot, int dec_pos) {
  std::string out = "HIERARCHY\n";
  write_joint(bvh, 0, 0, out);
  out += fmt::format("MOTION\nFrames: {}\nFrame Time: {:.8f}\n", bvh.frames.size(), bvh.frame_time);
  std::vector<bool> is_pos(static_cast<std::size_t>(bvh.channels), false);
  for (const auto& j : bvh.joints)
    for (std::size_t c = 0; c < j.channels.size(); ++c)
      is_pos[j.first_channel + c] = j.channels[c].find("position") != std::string::npos;
  for (const auto& f : bvh.frames) {
    for (std::size_t c = 0; c < f.size(); ++c) {
      if (c) out += ' ';
      out += fixed(f[c], is_pos[c] ? dec_pos : dec_rot);
    }
    out += '\n';
  }
  return out;
}

namespace {
// Converters such as cgspeed's prepend a T-pose: frame 0 then differs from frame 1
// far more than any later frame differs from the next. Measured on root-relative
// joint positions; the factor is generous (a real first frame moves like the rest).
bool starts_with_inserted_pose(const MotionClip& clip) {
  constexpr double kJumpFactor = 8.0;
  const auto& f = clip.frames;
  if (f.size() < 4) return false;
  auto change = [&](std::size_t a) {
    double s = 0;
    for (std::size_t j = 0; j < f[a].size(); ++j) s += norm((f[a + 1][j] - f[a + 1][0]) - (f[a][j] - f[a][0]));
    return s;
  };
  std::vector<double> later;
  for (std::size_t a = 1; a + 1 < f.size(); ++a) later.push_back(change(a));
  std::nth_element(later.begin(), later.begin() + static_cast<std::ptrdiff_t>(later.size() / 2), later.end());
  const double typical = later[later.size() / 2];
  return change(0) > kJumpFactor * std::max(typical, 1e-9);
}
}  // namespace

MotionClip bvh_to_clip(const BvhFile& bvh, const std::string& name, const std::string& person) {
  MotionClip clip;
  clip.name = name;
  clip.person = person;
  clip.format = "bvh";
  clip.fps = 1.0 / bvh.frame_time;
  clip.metres_per_unit = 0.01;  // BVH files in the wild (and cgspeed's) are in centimetres
  for (const auto& j : bvh.joints) {
    clip.joint_names.push_back(j.name);
    clip.parents.push_back(j.parent);
  }
  const std::size_t n = bvh.joints.size();
  std::vector<Mat3> rot(n);
  clip.frames.reserve(bvh.frames.size());
  for (const auto& values : bvh.frames) {
    std::vector<Vec3> pos(n);
    for (std::size_t j = 0; j < n; ++j) {
      const BvhJoint& jt = bvh.joints[j];
      Vec3 local = jt.offset;
      Mat3 r;
      for (std::size_t c = 0; c < jt.channels.size(); ++c) {
        const double v = values[jt.first_channel + c];
        const std::string& ch = jt.channels[c];
        const int axis = ch[0] - 'X';
        if (ch[1] == 'p') {
          (axis == 0 ? local.x : axis == 1 ? local.y : local.z) += v;
        } else {
          r = r * axis_rotation(axis, v);
        }
      }
      if (jt.parent < 0) {
        pos[j] = local;
        rot[j] = r;
      } else {
        pos[j] = pos[jt.parent] + rot[jt.parent] * local;
        rot[j] = rot[jt.parent] * r;
      }
    }
    clip.frames.push_back(std::move(pos));
  }
  clip.first_frame_is_rest_pose = starts_with_inserted_pose(clip);
  return clip;
}

int MotionClip::joint(const std::string& name) const {
  for (std::size_t j = 0; j < joint_names.size(); ++j) {
    const auto& a = joint_names[j];
    if (a.size() == name.size() && std::equal(a.begin(), a.end(), name.begin(), [](char x, char y) {
          return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
        }))
      return static_cast<int>(j);
  }
  return -1;
}

}  // namespace gait
