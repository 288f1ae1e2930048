#include "commands.hpp"
namespace gait::cli { void add_dataset_commands(CLI::App&) {} }
