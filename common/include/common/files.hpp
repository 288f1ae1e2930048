// File output that never leaves a half-written or clobbered result behind:
// everything is written to "<path>.tmp.<pid>" and renamed over the target only
// after the write succeeded.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace common {

void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);
// Before a long run: throws one line naming `what` (e.g. "--json") when write_file_atomic
// could not write `path` later: the path is a directory, or a part of its directory exists
// and is not a directory. A directory that does not exist yet is fine (it is created).
void check_output_path(const std::filesystem::path& path, std::string_view what);
// The same for an output folder: throws when `path` exists and is not a directory, or a
// part of it exists and is not a directory. A folder that does not exist yet is fine.
void check_output_dir(const std::filesystem::path& path, std::string_view what);
std::string read_file(const std::filesystem::path& path);  // throws naming the file

// Parses sizes such as "16384", "16KiB", "16K", "2MiB", "1.5MB". Throws on negative,
// unparsable or overflowing input, naming `what` (e.g. "--burst").
std::size_t parse_bytes(std::string_view text, std::string_view what);
// Parses durations such as "2us", "10 us", "1.5ms", "500ns", "0"; returns nanoseconds.
double parse_duration_ns(std::string_view text, std::string_view what);

// Human-readable forms for tables: "16 KiB", "2.00 us".
std::string format_bytes(double bytes);
std::string format_ns(double ns);

}  // namespace common
