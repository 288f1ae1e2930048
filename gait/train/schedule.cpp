#include "gait/train/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace gait::train {

double learning_rate(const SchedulerConfig& s, double base_lr, int it, int total) {
  const int w = s.warmup_iterations;
  if (w > 0 && it < w) return base_lr * (0.01 + 0.99 * static_cast<double>(it) / w);
  switch (s.type) {
    case ScheduleType::Constant: return base_lr;
    case ScheduleType::Step: {
      const auto passed = std::upper_bound(s.milestones.begin(), s.milestones.end(), it) - s.milestones.begin();
      return base_lr * std::pow(s.gamma, static_cast<double>(passed));
    }
    case ScheduleType::Cosine: {
      const double span = std::max(1, total - w);
      const double u = std::clamp((it - w) / span, 0.0, 1.0);
      return s.min_lr + (base_lr - s.min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * u));
    }
  }
  return base_lr;
}

int iterations_for_budget(int done, double elapsed_s, int calib_iteration, double calib_s, double budget_s, int ceiling) {
  const int steps = done - calib_iteration;
  const double secs = elapsed_s - calib_s;
  if (steps <= 0 || secs <= 0) return ceiling;
  const double more = std::floor(0.97 * std::max(0.0, budget_s - elapsed_s) * steps / secs);
  if (done >= ceiling) return ceiling;
  return static_cast<int>(std::min<double>(ceiling, done + std::max(1.0, more)));
}

}  // namespace gait::train
