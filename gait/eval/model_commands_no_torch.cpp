// Built instead of the model commands when LibTorch is not found: the commands exist
// and say why they cannot run.
#include <string>

#include "common/check.hpp"
#include "gait/eval/commands.hpp"

namespace gait::cli {

void add_model_commands(CLI::App& app) {
  for (const char* name : {"train", "eval", "embed", "identify", "bench-infer", "tune-fusion"}) {
    CLI::App* c = app.add_subcommand(name, std::string(name) + " (unavailable: built without LibTorch)");
    c->allow_extras();
    c->callback([name] {
      throw common::Error(std::string("'gait ") + name +
                          "' needs LibTorch, and this build has none: install libtorch-dev (./run deps) and "
                          "reconfigure with -DGAIT_TORCH=AUTO or ON");
    });
  }
}

}  // namespace gait::cli
