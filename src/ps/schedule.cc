#include "ps/schedule.h"

#include <algorithm>
#include <cmath>

namespace strata {

double LrSchedule::Rate(int64_t step) const {
  if (warmup_steps > 0 && step < warmup_steps) {
    return lr * static_cast<double>(step + 1) /
           static_cast<double>(warmup_steps);
  }
  switch (kind) {
    case Kind::kConstant:
      return lr;
    case Kind::kStep:
      return lr * std::pow(step_gamma, static_cast<double>(
                                           (step - warmup_steps) / step_every));
    case Kind::kCosine: {
      int64_t span = std::max<int64_t>(1, total_steps - warmup_steps);
      double t = std::min(1.0, static_cast<double>(step - warmup_steps) / span);
      return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(M_PI * t));
    }
  }
  return lr;
}

LrSchedule LrSchedule::FromConfig(const Config& c, int64_t total_steps) {
  LrSchedule s;
  const std::string& kind = c.GetString("train.schedule");
  s.kind = kind == "step"     ? Kind::kStep
           : kind == "cosine" ? Kind::kCosine
                              : Kind::kConstant;
  s.lr = c.GetFloat("train.lr");
  s.warmup_steps = c.GetInt("train.warmup_steps");
  s.step_every = c.GetInt("train.step_every");
  s.step_gamma = c.GetFloat("train.step_gamma");
  s.min_lr = c.GetFloat("train.min_lr");
  s.total_steps = std::max<int64_t>(1, total_steps);
  return s;
}

}  // namespace strata
