// gait strip ROOT --subject N [--views 36,90,144] --out FILE.png
//   One subject under NM, BG and CL (nm-01, bg-01, cl-01; rows) at the chosen views.
// gait strip ROOT --subject N --walk VIEW [--sequence nm-01] [--count 8] --out FILE.png
//   Successive frames of one sequence in a row (every `--every` frames).
// The drawing is gait::render_strip (gait/strip.hpp).
#include <fmt/format.h>

#include <filesystem>

#include "commands.hpp"
#include "common/files.hpp"
#include "common/validate.hpp"
#include "common/png.hpp"
#include "gait/dataset.hpp"
#include "gait/strip.hpp"

namespace gait::cli {

namespace fs = std::filesystem;

namespace {

struct StripArgs {
  fs::path root, out;
  StripSpec spec;
};

void run_strip(const StripArgs& a) {
  common::check_output_path(a.out, "strip: --out");
  const common::Image canvas = render_strip(scan_dataset(resolve_dataset(a.root)), a.spec);
  const auto bytes = common::encode_png(canvas);
  common::write_file_atomic(a.out, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  const std::size_t tiles = a.spec.walk_view ? a.spec.count : 3 * a.spec.views.size();
  fmt::print("{}: {}x{} ({} tiles, {:.1f} KB)\n", a.out.string(), canvas.width, canvas.height, tiles,
             bytes.size() / 1024.0);
}

}  // namespace

void add_strip_command(CLI::App& app) {
  auto* a = new StripArgs;
  auto* cmd = app.add_subcommand("strip", "Draw one subject's silhouettes with the skeleton over them (PNG)");
  cmd->add_option("root", a->root, "Dataset root (a gait synth output)")
      ->required()
      ->check(common::validate::existing_folder());
  cmd->add_option("--subject", a->spec.subject, "Subject id")->check(common::validate::range(1, 999, "subject id"));
  cmd->add_option("--views", a->spec.views, "Views (columns) for the NM/BG/CL grid")
      ->delimiter(',')
      ->check(common::validate::range(0, 359, "degrees"));
  cmd->add_option("--walk", a->spec.walk_view, "Instead: successive frames of one sequence at this view")
      ->check(common::validate::range(0, 359, "degrees"));
  cmd->add_option("--sequence", a->spec.sequence, "Sequence for --walk, e.g. nm-01");
  cmd->add_option("--count", a->spec.count, "Frames for --walk")->check(common::validate::range(1, 1000, "frames"));
  cmd->add_option("--every", a->spec.every, "Frame step for --walk")->check(common::validate::range(1, 1000, "frames"));
  cmd->add_option("--out", a->out, "Output PNG")->required();
  cmd->callback([a] {
    common::validate::unique<int>(a->spec.views, "--views");
    run_strip(*a);
  });
}

}  // namespace gait::cli
