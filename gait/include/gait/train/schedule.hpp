// Learning-rate schedules, a pure function of the iteration and, in a time-budgeted run,
// of the elapsed fraction of the budget (so a resumed run needs no scheduler state):
//   warm-up   it < W:  lr = base * (0.01 + 0.99 * it / W)
//   constant:          lr = base
//   step:              lr = base * gamma^(number of milestones <= it)
//   cosine:            lr = min + (base - min) * (1 + cos(pi * u)) / 2,
//                      u = max((it - W) / (total - W), time_progress), clamped to [0, 1]
// time_progress is 0 unless the run follows a wall-clock budget
// (trainer.fit_schedule_to_time: elapsed / budget): the cosine then ends at whichever of
// the iteration ceiling and the budget comes first, and a run whose steps speed up
// midway (other processes on the GPU finish) keeps training at the schedule's pace
// instead of stopping at a count fitted to its slow start.
#pragma once

#include "gait/train/config.hpp"

namespace gait::train {

double learning_rate(const SchedulerConfig& s, double base_lr, int iteration, int total_iterations,
                     double time_progress = 0);

}  // namespace gait::train
