// Training curves of a run, drawn from its train_log.csv (Trainer::run writes a row every
// trainer.log_every iterations; a resumed run appends to the earlier run's rows): the
// losses, the batch's identity accuracy and active-triplet fraction, and the learning
// rate, each against the iteration, stacked in one PNG. The figures are the log's, so the
// picture can be drawn again from the CSV at any time.
#pragma once

#include <filesystem>
#include <string>

namespace gait::train {

// `title` heads the first chart (e.g. the run folder's name). Throws common::Error naming
// the file on a log without rows, a missing column or a bad cell, and in a build that draws
// no charts (common::plot::charts_available()); an existing `png` then stays as it was.
void write_train_curves(const std::filesystem::path& log_csv, const std::filesystem::path& png,
                        const std::string& title);

}  // namespace gait::train
