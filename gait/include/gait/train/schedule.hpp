// Learning-rate schedules, a pure function of the iteration (so a resumed run needs no
// scheduler state):
//   warm-up   it < W:  lr = base * (0.01 + 0.99 * it / W)
//   constant:          lr = base
//   step:              lr = base * gamma^(number of milestones <= it)
//   cosine:            lr = min + (base - min) * (1 + cos(pi * (it - W) / (total - W))) / 2
#pragma once

#include "gait/train/config.hpp"

namespace gait::train {

double learning_rate(const SchedulerConfig& s, double base_lr, int iteration, int total_iterations);

// Total iterations that fit a wall-clock budget (trainer.fit_schedule_to_time): `done`
// steps at `elapsed_s` seconds, the step time measured between (calib_iteration,
// calib_s) and (done, elapsed_s), 3 % of the remaining time kept as a margin. The result
// lies in [done + 1, ceiling]; `ceiling` when nothing was measured.
int iterations_for_budget(int done, double elapsed_s, int calib_iteration, double calib_s, double budget_s, int ceiling);

}  // namespace gait::train
