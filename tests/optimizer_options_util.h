#pragma once

// Optimizer settings for the tests that compare optimizers (models_test
// against torch::optim, tensor_optimizer_test against the host one).
#include "ps/optimizer.h"

namespace strata::testing_util {

inline OptimizerOptions SgdOptions(double momentum, bool nesterov,
                                   double weight_decay) {
  OptimizerOptions o;
  o.momentum = momentum;
  o.nesterov = nesterov;
  o.weight_decay = weight_decay;
  return o;
}

// Adam with its default betas and eps.
inline OptimizerOptions AdamOptions(double weight_decay) {
  OptimizerOptions o;
  o.kind = OptimizerOptions::Kind::kAdam;
  o.weight_decay = weight_decay;
  return o;
}

}  // namespace strata::testing_util
