// Reports of a rank-1 evaluation (torch-free):
//   - the table printed by `gait eval` (probe views across, NM/BG/CL down, means last);
//   - CSV files: rank1_per_view.csv (set, probe_view, rank1), rank1_matrix.csv (set,
//     probe_view, gallery_view, accuracy) and the means in rank1_summary.csv;
//   - a heatmap PNG of the probe-view x gallery-view accuracies, one panel per probe
//     set, the excluded identical-view diagonal shown grey;
//   - a JSON object with the same numbers;
//   - over a run's checkpoints: the NM, BG and CL means against the iteration
//     (rank1_by_iteration.csv, .json and .png).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/png.hpp"
#include "gait/eval/rank1.hpp"

namespace gait::eval {

std::string format_rank1_table(const Rank1Result& r);
void write_rank1_csv(const std::filesystem::path& dir, const Rank1Result& r);
common::Image render_rank1_heatmap(const Rank1Result& r, const std::string& title);
void write_rank1_heatmap(const std::filesystem::path& png, const Rank1Result& r, const std::string& title);
nlohmann::json rank1_json(const Rank1Result& r);

// One checkpoint of a run, evaluated.
struct Rank1AtIteration {
  std::int64_t iteration = 0;
  double train_seconds = 0;
  std::string checkpoint;
  Rank1Result result;
};
std::string format_rank1_by_iteration(const std::vector<Rank1AtIteration>& rows);
// Writes rank1_by_iteration.csv (iteration, train_seconds, NM, BG, CL, checkpoint) and
// rank1_by_iteration.json (each row's full table) into `dir`, and the chart
// rank1_by_iteration.png where the build draws charts.
void write_rank1_by_iteration(const std::filesystem::path& dir, const std::vector<Rank1AtIteration>& rows,
                              const std::string& title);

}  // namespace gait::eval
