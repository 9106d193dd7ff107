#pragma once

#include <cstdint>

#include "common/config.h"

namespace strata {

// Learning rate as a function of the global step: optional linear warm-up
// from 0 to `lr` over `warmup_steps`, then constant, step decay (x gamma
// every `step_every` steps) or cosine annealing to `min_lr` at
// `total_steps`. Pure and thread-safe.
struct LrSchedule {
  enum class Kind { kConstant, kStep, kCosine };
  Kind kind = Kind::kConstant;
  double lr = 0.05;
  int64_t warmup_steps = 0;
  int64_t step_every = 1000;
  double step_gamma = 0.1;
  double min_lr = 0.0;
  int64_t total_steps = 1;

  double Rate(int64_t step) const;
  // This schedule over a run of `total_steps` (at least 1).
  LrSchedule ForSteps(int64_t total_steps) const {
    LrSchedule s = *this;
    s.total_steps = total_steps > 1 ? total_steps : 1;
    return s;
  }

  // Reads train.lr, train.schedule, ... ; total_steps is the run's budget.
  static LrSchedule FromConfig(const Config& config, int64_t total_steps);
};

}  // namespace strata
