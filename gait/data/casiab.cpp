#include "gait/casiab.hpp"

#include <fmt/format.h>

#include <cctype>

namespace gait {

std::vector<int> standard_views() {
  std::vector<int> v;
  for (int i = 0; i < kNumViews; ++i) v.push_back(view_angle(i));
  return v;
}

int sequences_per_condition(Condition c) { return c == Condition::NM ? 6 : 2; }

std::string_view condition_name(Condition c) {
  switch (c) {
    case Condition::NM: return "nm";
    case Condition::BG: return "bg";
    case Condition::CL: return "cl";
  }
  return "??";
}

std::optional<Condition> parse_condition(std::string_view s) {
  if (s == "nm") return Condition::NM;
  if (s == "bg") return Condition::BG;
  if (s == "cl") return Condition::CL;
  return std::nullopt;
}

std::string subject_name(int subject) { return fmt::format("{:03d}", subject); }
std::string view_name(int view) { return fmt::format("{:03d}", view); }
std::string seq_dir_name(const SequenceKey& k) { return fmt::format("{}-{:02d}", condition_name(k.cond), k.seq); }
std::string sequence_id(const SequenceKey& k) {
  return fmt::format("{:03d}-{}-{:02d}-{:03d}", k.subject, condition_name(k.cond), k.seq, k.view);
}
std::string frame_file_name(const SequenceKey& k, int frame) {
  return fmt::format("{}-{:03d}.png", sequence_id(k), frame);
}

namespace {
std::optional<int> digits(std::string_view s, std::size_t n) {
  if (s.size() != n) return std::nullopt;
  int v = 0;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}
}  // namespace

std::optional<int> parse_subject(std::string_view s) {
  auto v = digits(s, 3);
  if (!v || *v == 0) return std::nullopt;
  return v;
}

std::optional<int> parse_view(std::string_view s) {
  auto v = digits(s, 3);
  if (!v || *v >= 360) return std::nullopt;
  return v;
}

std::optional<std::pair<Condition, int>> parse_seq_dir(std::string_view s) {
  if (s.size() != 5 || s[2] != '-') return std::nullopt;
  auto c = parse_condition(s.substr(0, 2));
  auto n = digits(s.substr(3), 2);
  if (!c || !n || *n == 0) return std::nullopt;
  return std::pair{*c, *n};
}

std::optional<SequenceKey> parse_sequence_id(std::string_view s) {
  // "001-nm-01-090"
  if (s.size() != 13 || s[3] != '-' || s[9] != '-') return std::nullopt;
  auto sub = parse_subject(s.substr(0, 3));
  auto sd = parse_seq_dir(s.substr(4, 5));
  auto v = parse_view(s.substr(10, 3));
  if (!sub || !sd || !v) return std::nullopt;
  return SequenceKey{*sub, sd->first, sd->second, *v};
}

std::optional<int> parse_frame_number(std::string_view name) {
  const auto dot = name.rfind('.');
  const auto dash = name.rfind('-');
  if (dot == std::string_view::npos || dash == std::string_view::npos || dash > dot) return std::nullopt;
  const auto num = name.substr(dash + 1, dot - dash - 1);
  if (num.empty() || num.size() > 6) return std::nullopt;
  int v = 0;
  for (char c : num) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

std::vector<std::pair<Condition, int>> standard_sequences() {
  std::vector<std::pair<Condition, int>> out;
  for (Condition c : kConditions)
    for (int n = 1; n <= sequences_per_condition(c); ++n) out.emplace_back(c, n);
  return out;
}

}  // namespace gait
