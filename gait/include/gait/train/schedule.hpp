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

}  // namespace gait::train
