#include "gait/motion/asf_amc.hpp"

#include <algorithm>
#include <cctype>
#include <sstream>

#include "common/files.hpp"
#include "text_tokens.hpp"

namespace gait {

using detail::Token;
using detail::Tokens;

int AsfSkeleton::bone(const std::string& n) const {
  for (std::size_t i = 0; i < bones.size(); ++i)
    if (bones[i].name == n) return static_cast<int>(i);
  return -1;
}

namespace {

std::string lower(std::string_view s) {
  std::string o(s);
  for (char& c : o) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return o;
}

bool is_section(const Token& t) { return !t.text.empty() && t.text[0] == ':'; }

void skip_to_section(Tokens& tk) {
  while (!tk.done() && !is_section(tk.peek())) tk.next();
}

bool valid_order(std::string_view o) {
  return o.size() == 3 && std::is_permutation(o.begin(), o.end(), std::string_view("XYZ").begin());
}

void parse_bone(Tokens& tk, AsfSkeleton& asf) {
  AsfBone b;
  bool have_name = false;
  for (;;) {
    const Token t = tk.next();
    if (t.text == "end") break;
    if (t.text == "id") {
      tk.next();
    } else if (t.text == "name") {
      b.name = std::string(tk.next().text);
      have_name = true;
    } else if (t.text == "direction") {
      b.direction = {tk.number(), tk.number(), tk.number()};
    } else if (t.text == "length") {
      b.length = tk.number();
      if (b.length < 0) tk.fail(t, "negative bone length");
    } else if (t.text == "axis") {
      b.axis_deg = {tk.number(), tk.number(), tk.number()};
      const Token o = tk.next();
      if (!valid_order(o.text)) tk.fail(o, fmt::format("bad axis order '{}'", o.text));
      b.axis_order = std::string(o.text);
    } else if (t.text == "dof") {
      while (!tk.done()) {
        const auto w = lower(tk.peek().text);
        if (w != "rx" && w != "ry" && w != "rz" && w != "tx" && w != "ty" && w != "tz" && w != "l") break;
        b.dof.push_back(w);
        tk.next();
      }
    } else if (t.text == "limits") {
      // "(lo hi)" pairs, one per dof; values are irrelevant to playback.
      while (!tk.done() && tk.peek().text != "end" && tk.peek().text.find('(') != std::string_view::npos) {
        tk.next();
        while (!tk.done() && tk.peek().text.find(')') == std::string_view::npos) tk.next();
        tk.next();
      }
    } else if (t.text == "bodymass" || t.text == "cofmass") {
      tk.next();
    } else {
      tk.fail(t, fmt::format("unknown bone field '{}'", t.text));
    }
  }
  if (!have_name) throw common::Error(fmt::format("{}:{}: bone without a name", tk.source(), tk.line()));
  if (asf.bone(b.name) >= 0 || b.name == "root")
    throw common::Error(fmt::format("{}:{}: bone '{}' defined twice", tk.source(), tk.line(), b.name));
  asf.bones.push_back(std::move(b));
}

// Euler rotation applying the axes in `order` (first letter first): R = R3 * R2 * R1.
Mat3 euler(const Vec3& deg, const std::string& order) {
  Mat3 r;
  for (char c : order) {
    const int axis = c - 'X';
    const double v = axis == 0 ? deg.x : axis == 1 ? deg.y : deg.z;
    r = axis_rotation(axis, v) * r;
  }
  return r;
}

}  // namespace

namespace {

std::string strip_comments(const std::string& text) {  // '#' to the end of the line
  std::string cleaned;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const auto h = line.find('#');
    cleaned.append(line, 0, h == std::string::npos ? line.size() : h);
    cleaned.push_back('\n');
  }
  return cleaned;
}

void parse_units(Tokens& tk, AsfSkeleton& asf) {
  while (!tk.done() && !is_section(tk.peek())) {
    const Token k = tk.next();
    const Token v = tk.next();
    if (k.text == "length") {
      asf.length_unit = tk.to_number(v);
      if (asf.length_unit <= 0) tk.fail(v, "length unit must be positive");
    } else if (k.text == "angle") {
      asf.degrees = lower(v.text) != "rad";
    }
  }
}

void parse_root(Tokens& tk, AsfSkeleton& asf) {
  while (!tk.done() && !is_section(tk.peek())) {
    const Token k = tk.next();
    if (k.text == "order") {
      while (!tk.done() && !is_section(tk.peek()) && tk.peek().text.size() == 2) {
        const Token c = tk.next();
        const std::string ch = lower(c.text);
        // Channels index the axes by their letter: anything else would index past them.
        if ((ch[0] != 't' && ch[0] != 'r') || ch[1] < 'x' || ch[1] > 'z')
          tk.fail(c, fmt::format("bad :root order channel '{}' (tx ty tz rx ry rz)", c.text));
        asf.root_order.push_back(ch);
      }
    } else if (k.text == "axis") {
      const Token o = tk.next();
      if (!valid_order(o.text)) tk.fail(o, fmt::format("bad root axis order '{}'", o.text));
      asf.root_axis_order = std::string(o.text);
    } else if (k.text == "position") {
      asf.root_position = {tk.number(), tk.number(), tk.number()};
    } else if (k.text == "orientation") {
      asf.root_orientation = {tk.number(), tk.number(), tk.number()};
    } else {
      tk.fail(k, fmt::format("unknown :root field '{}'", k.text));
    }
  }
}

// ":hierarchy begin ... end": each line is a parent followed by its children.
std::vector<std::pair<std::string, std::string>> parse_hierarchy(Tokens& tk) {
  std::vector<std::pair<std::string, std::string>> links;
  tk.expect("begin");
  std::size_t line = 0;
  std::string parent;
  for (;;) {
    const Token t = tk.next();
    if (t.text == "end") break;
    if (t.line != line) {
      line = t.line;
      parent = std::string(t.text);
    } else {
      links.emplace_back(parent, std::string(t.text));
    }
  }
  return links;
}

// Sets each bone's parent from the hierarchy's links, then orders the bones parents-first
// (the file order usually is, but the format does not promise it).
void link_bones(AsfSkeleton& asf, const std::vector<std::pair<std::string, std::string>>& links,
                const std::string& source) {
  for (const auto& [p, c] : links) {
    const int ci = asf.bone(c);
    if (ci < 0) throw common::Error(fmt::format("{}: hierarchy names unknown bone '{}'", source, c));
    if (p == "root") {
      asf.bones[ci].parent = -1;
    } else {
      const int pi = asf.bone(p);
      if (pi < 0) throw common::Error(fmt::format("{}: hierarchy names unknown bone '{}'", source, p));
      asf.bones[ci].parent = pi;
    }
  }
  std::vector<AsfBone> ordered;
  std::vector<int> new_index(asf.bones.size(), -1);
  for (std::size_t pass = 0; pass <= asf.bones.size() && ordered.size() < asf.bones.size(); ++pass)
    for (std::size_t i = 0; i < asf.bones.size(); ++i)
      if (new_index[i] < 0 && (asf.bones[i].parent < 0 || new_index[asf.bones[i].parent] >= 0)) {
        new_index[i] = static_cast<int>(ordered.size());
        ordered.push_back(asf.bones[i]);
      }
  if (ordered.size() != asf.bones.size()) throw common::Error(source + ": the hierarchy has a cycle");
  for (auto& b : ordered) b.parent = b.parent < 0 ? -1 : new_index[b.parent];
  asf.bones = std::move(ordered);
}

}  // namespace

AsfSkeleton parse_asf(const std::string& text, const std::string& source) {
  const std::string cleaned = strip_comments(text);
  Tokens tk(cleaned, source);
  AsfSkeleton asf;
  bool have_bones = false, have_hierarchy = false;
  std::vector<std::pair<std::string, std::string>> links;
  while (!tk.done()) {
    const Token s = tk.next();
    if (!is_section(s)) tk.fail(s, fmt::format("expected a ':section', found '{}'", s.text));
    if (s.text == ":version") {
      tk.next();
    } else if (s.text == ":name") {
      asf.name = std::string(tk.next().text);
    } else if (s.text == ":units") {
      parse_units(tk, asf);
    } else if (s.text == ":root") {
      parse_root(tk, asf);
    } else if (s.text == ":bonedata") {
      have_bones = true;
      while (!tk.done() && !is_section(tk.peek())) {
        tk.expect("begin");
        parse_bone(tk, asf);
      }
    } else if (s.text == ":hierarchy") {
      have_hierarchy = true;
      links = parse_hierarchy(tk);
    } else {
      skip_to_section(tk);  // :documentation, and unknown sections, which the format allows
    }
  }
  if (!have_bones || !have_hierarchy) throw common::Error(source + ": missing :bonedata or :hierarchy");
  if (asf.root_order.empty()) asf.root_order = {"tx", "ty", "tz", "rx", "ry", "rz"};
  link_bones(asf, links, source);
  return asf;
}

AsfSkeleton read_asf_file(const std::filesystem::path& path) { return parse_asf(common::read_file(path), path.string()); }

AmcFile parse_amc(const std::string& text, const std::string& source) {
  AmcFile amc;
  std::istringstream in(text);
  std::string line;
  std::size_t lineno = 0;
  long long expected = -1;
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const auto first = line.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    if (line[first] == '#' || line[first] == ':') {
      if (amc.frames.empty()) amc.header.push_back(line);
      continue;
    }
    std::istringstream ls(line);
    std::string head;
    ls >> head;
    if (std::all_of(head.begin(), head.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
      const long long n = std::stoll(head.substr(0, 12));
      if (expected >= 0 && n != expected)
        throw common::Error(fmt::format("{}:{}: frame {} follows frame {}", source, lineno, n, expected - 1));
      expected = n + 1;
      amc.frames.emplace_back();
      continue;
    }
    if (amc.frames.empty()) throw common::Error(fmt::format("{}:{}: bone values before the first frame number", source, lineno));
    std::vector<double> values;
    std::string tok;
    while (ls >> tok) {
      char* end = nullptr;
      const double v = std::strtod(tok.c_str(), &end);
      if (end != tok.c_str() + tok.size() || !std::isfinite(v))
        throw common::Error(fmt::format("{}:{}: '{}' is not a number", source, lineno, tok));
      values.push_back(v);
    }
    amc.frames.back()[head] = std::move(values);
  }
  if (amc.frames.empty()) throw common::Error(source + ": no frames");
  return amc;
}

AmcFile read_amc_file(const std::filesystem::path& path) { return parse_amc(common::read_file(path), path.string()); }

std::string write_amc(const AmcFile& amc, const std::vector<std::string>& keep, int dec_rot, int dec_pos) {
  auto fixed = [](double v, int d) {
    std::string s = fmt::format("{:.{}f}", v, d);
    while (s.find('.') != std::string::npos && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s == "-0" ? std::string("0") : s;
  };
  std::string out;
  for (const auto& h : amc.header) {
    out += h;
    out.push_back('\n');
  }
  for (std::size_t f = 0; f < amc.frames.size(); ++f) {
    out += fmt::format("{}\n", f + 1);
    for (const auto& bone : keep) {
      auto it = amc.frames[f].find(bone);
      if (it == amc.frames[f].end()) continue;
      out += bone;
      for (std::size_t i = 0; i < it->second.size(); ++i) {
        out.push_back(' ');
        out += fixed(it->second[i], bone == "root" && i < 3 ? dec_pos : dec_rot);
      }
      out.push_back('\n');
    }
  }
  return out;
}

MotionClip amc_to_clip(const AsfSkeleton& asf, const AmcFile& amc, double fps, const std::string& name,
                       const std::string& person) {
  MotionClip clip;
  clip.name = name;
  clip.person = person;
  clip.format = "asf-amc";
  clip.fps = fps;
  clip.metres_per_unit = asf.metres_per_unit();
  clip.joint_names.push_back("root");
  clip.parents.push_back(-1);
  for (const auto& b : asf.bones) {
    clip.joint_names.push_back(b.name);
    clip.parents.push_back(b.parent + 1);  // joint 0 is the root
  }
  const double to_deg = asf.degrees ? 1.0 : 180.0 / 3.14159265358979323846;
  const Mat3 root_c = euler(asf.root_orientation, asf.root_axis_order);
  std::vector<Mat3> c(asf.bones.size()), c_inv(asf.bones.size());
  for (std::size_t i = 0; i < asf.bones.size(); ++i) {
    c[i] = euler(asf.bones[i].axis_deg, asf.bones[i].axis_order);
    c_inv[i] = c[i].transposed();
  }
  std::vector<Mat3> rot(asf.bones.size());
  for (std::size_t f = 0; f < amc.frames.size(); ++f) {
    const auto& fr = amc.frames[f];
    std::vector<Vec3> pos(asf.bones.size() + 1);
    // Root: translation and rotation in :root order.
    Vec3 t = asf.root_position, r_deg;
    std::string r_order;
    if (auto it = fr.find("root"); it != fr.end()) {
      if (it->second.size() != asf.root_order.size())
        throw common::Error(fmt::format("{}: frame {}: root has {} values, :root order has {}", name, f + 1,
                                        it->second.size(), asf.root_order.size()));
      for (std::size_t i = 0; i < asf.root_order.size(); ++i) {
        const std::string& ch = asf.root_order[i];
        const double v = it->second[i];
        const int axis = ch[1] - 'x';
        if (ch[0] == 't') {
          (axis == 0 ? t.x : axis == 1 ? t.y : t.z) = v;
        } else {
          (axis == 0 ? r_deg.x : axis == 1 ? r_deg.y : r_deg.z) = v * to_deg;
          r_order += static_cast<char>('X' + axis);
        }
      }
    }
    const Mat3 root_rot = root_c * euler(r_deg, r_order.empty() ? "XYZ" : r_order) * root_c.transposed();
    pos[0] = t;
    for (std::size_t i = 0; i < asf.bones.size(); ++i) {
      const AsfBone& b = asf.bones[i];
      Vec3 m_deg;
      std::string m_order;
      if (auto it = fr.find(b.name); it != fr.end()) {
        std::size_t k = 0;
        for (const auto& d : b.dof) {
          if (k >= it->second.size())
            throw common::Error(fmt::format("{}: frame {}: bone '{}' has {} values for {} dof", name, f + 1, b.name,
                                            it->second.size(), b.dof.size()));
          const double v = it->second[k++];
          if (d[0] != 'r') continue;
          const int axis = d[1] - 'x';
          (axis == 0 ? m_deg.x : axis == 1 ? m_deg.y : m_deg.z) = v * to_deg;
          m_order += static_cast<char>('X' + axis);
        }
      }
      const Mat3& parent_rot = b.parent < 0 ? root_rot : rot[b.parent];
      rot[i] = parent_rot * c[i] * euler(m_deg, m_order.empty() ? "XYZ" : m_order) * c_inv[i];
      const Vec3& start = pos[b.parent + 1];
      pos[i + 1] = start + rot[i] * (b.direction * b.length);
    }
    clip.frames.push_back(std::move(pos));
  }
  return clip;
}

}  // namespace gait
