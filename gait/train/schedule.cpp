#include "gait/train/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace gait::train {

double learning_rate(const SchedulerConfig& s, double base_lr, int it, int total, double time_progress) {
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
      const double u = std::clamp(std::max((it - w) / span, time_progress), 0.0, 1.0);
      return s.min_lr + (base_lr - s.min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * u));
    }
  }
  return base_lr;
}

}  // namespace gait::train
