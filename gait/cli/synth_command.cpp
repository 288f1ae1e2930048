#include "commands.hpp"
namespace gait::cli { void add_synth_command(CLI::App&) {} }
