// CASIA-B naming: subjects, walking conditions, sequences and views, and the
// folder and file names built from them.
//
//   <root>/<sid>/<cond>-<nn>/<view>/<sid>-<cond>-<nn>-<view>-<frame>.png
//   sid 001..124; cond nm (nn 01..06) | bg (01..02) | cl (01..02); view 000..180 step 018
//
// A sequence id is "<sid>-<cond>-<nn>-<view>", e.g. "001-nm-01-090"; frame numbers are
// the video frame numbers (1-based, three digits in file names).
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gait {

enum class Condition : std::uint8_t { NM = 0, BG = 1, CL = 2 };
inline constexpr Condition kConditions[] = {Condition::NM, Condition::BG, Condition::CL};

inline constexpr int kCasiaSubjects = 124;  // subjects 001..124
inline constexpr int kViewStepDeg = 18;     // 11 cameras on a half circle
inline constexpr int kNumViews = 11;        // 000, 018, ..., 180
inline constexpr int kSequencesPerSubject = 10;  // nm-01..06, bg-01..02, cl-01..02

inline constexpr int view_angle(int view_index) { return view_index * kViewStepDeg; }
std::vector<int> standard_views();  // {0, 18, ..., 180}

int sequences_per_condition(Condition c);  // nm 6, bg 2, cl 2
std::string_view condition_name(Condition c);  // "nm", "bg", "cl"
std::optional<Condition> parse_condition(std::string_view s);

struct SequenceKey {
  int subject = 0;  // 1..999
  Condition cond = Condition::NM;
  int seq = 0;      // 1..99
  int view = 0;     // degrees, 0..359
  auto operator<=>(const SequenceKey&) const = default;
};

std::string subject_name(int subject);     // "001"
std::string view_name(int view);           // "090"
std::string seq_dir_name(const SequenceKey& k);  // "nm-01"
std::string sequence_id(const SequenceKey& k);   // "001-nm-01-090"
std::string frame_file_name(const SequenceKey& k, int frame);  // "001-nm-01-090-045.png"

// Strict parsers: nullopt on anything that does not match the layout exactly.
std::optional<int> parse_subject(std::string_view s);  // three digits, > 0
std::optional<int> parse_view(std::string_view s);     // three digits, < 360
std::optional<std::pair<Condition, int>> parse_seq_dir(std::string_view s);  // "nm-01"
std::optional<SequenceKey> parse_sequence_id(std::string_view s);
// Frame number from "<sequence id>-<frame>.png"; nullopt if the name does not end so.
std::optional<int> parse_frame_number(std::string_view file_name);

// The ten (condition, sequence) pairs of one subject in CASIA-B order.
std::vector<std::pair<Condition, int>> standard_sequences();

}  // namespace gait
