// File output that never leaves a half-written or clobbered result behind:
// everything is written to "<path>.tmp.<pid>" and renamed over the target only
// after the write succeeded. Outputs made of several files or a folder tree go
// through an OutputStage: written beside the target, moved into place on commit(),
// removed if the command fails, so a failed command leaves what was there.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace common {

void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);
// Several files that belong together (an .npy and its .csv): every temp file is written
// first, and the renames happen only once all of them are, so a failure leaves none.
void write_files_atomic(const std::vector<std::pair<std::filesystem::path, std::string>>& files);
// Before a long run: throws one line naming `what` (e.g. "--json") when write_file_atomic
// could not write `path` later: the path is a directory, or a part of its directory exists
// and is not a directory. A directory that does not exist yet is fine (it is created).
void check_output_path(const std::filesystem::path& path, std::string_view what);
// The same for an output folder: throws when `path` exists and is not a directory, or a
// part of it exists and is not a directory. A folder that does not exist yet is fine.
void check_output_dir(const std::filesystem::path& path, std::string_view what);
// Throws one line naming the file: no such file, a folder where a file is expected,
// unreadable.
std::string read_file(const std::filesystem::path& path);
// std::filesystem::remove_all(path, ec) without std::filesystem: PyTorch wheels export
// the std::filesystem functions of their statically linked libstdc++ (pytorch#133437),
// a program linked against such a libtorch has its calls bound to those copies, and
// LibTorch 2.11's remove_all crashed there (a call through a null pointer). A path that
// does not exist is no error; symbolic links are removed, not followed.
void remove_tree(const std::filesystem::path& path, std::error_code& ec);
// The folders directly in `dir`, sorted; none when `dir` cannot be listed.
std::vector<std::filesystem::path> sorted_subfolders(const std::filesystem::path& dir);

// The outputs of one command (a dataset, a cache, a run or report folder, a pair of
// files) staged in a hidden folder beside `target` (".<name>.stage-<pid>", so on the
// same file system and renames are cheap). Write under dir(); commit() moves what was
// written into `target`; the destructor without commit() removes the stage and any
// folder the stage had to create, so `target` and its parents are as they were.
//   merge:   each staged file replaces the target's file of that name; others stay.
//   replace: each staged top-level entry replaces the target's entry of that name
//            wholesale (a regenerated folder leaves none of its old files behind).
// A target that does not exist yet is created by one rename of the stage.
class OutputStage {
 public:
  enum class Mode { merge, replace };
  explicit OutputStage(std::filesystem::path target, Mode mode = Mode::merge);
  ~OutputStage();
  OutputStage(const OutputStage&) = delete;
  OutputStage& operator=(const OutputStage&) = delete;

  const std::filesystem::path& dir() const { return stage_; }
  const std::filesystem::path& target() const { return target_; }
  // Moves the staged outputs into place (throws naming the path on a failed move).
  void commit();

 private:
  std::filesystem::path target_, stage_;
  Mode mode_;
  std::vector<std::filesystem::path> created_;  // parents of target made for the stage, deepest first
  bool committed_ = false;
};

// Parses sizes such as "16384", "16KiB", "16K", "2MiB", "1.5MB". Throws on negative,
// unparsable or overflowing input, naming `what` (e.g. "--burst").
std::size_t parse_bytes(std::string_view text, std::string_view what);
// Parses durations such as "2us", "10 us", "1.5ms", "500ns", "0"; returns nanoseconds.
double parse_duration_ns(std::string_view text, std::string_view what);

// Human-readable forms for tables: "16 KiB", "2.00 us".
std::string format_bytes(double bytes);
std::string format_ns(double ns);

}  // namespace common
