// Placeholder until the Burst-Gap commands land (fit, predict, plot, demo).
#include "commands.hpp"

namespace xstage::cli {
void add_model_commands(CLI::App&) {}
}  // namespace xstage::cli
