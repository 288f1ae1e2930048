#include "gait/eval/commands.hpp"

namespace gait::cli {

void add_model_commands(CLI::App& app) {
  add_train_command(app);
  add_eval_commands(app);
}

}  // namespace gait::cli
