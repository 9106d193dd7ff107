#pragma once

#include <memory>

#include "common/status.h"
#include "models/flat_parameters.h"
#include "ps/optimizer.h"
#include "run/options.h"
#include "worker/step_profile.h"

namespace strata {

// The single-process trainer's update (train.local_optimizer): where it
// runs, and what its state and the host copy of the parameters need.
class LocalUpdate {
 public:
  virtual ~LocalUpdate() = default;
  // Applies the step's gradients, marking its phases in `phase`. Internal
  // for a LibTorch failure.
  virtual Status Step(FlatParameters& flat, double lr, PhaseMark& phase) = 0;
  // Brings the host copy of the parameters up to date (before a checkpoint
  // and at the end). Internal if the device failed.
  virtual Status SyncHost(FlatParameters& flat) = 0;
  virtual Result<OptimizerState> SaveState() const = 0;
  virtual Status RestoreState(const OptimizerState& state) = 0;
  // "host" or "device" (summary.json's optimizer_on).
  virtual const char* where() const = 0;
};

// The update train.local_optimizer asks for: LibTorch operations on the
// model's device (torch, or auto on a GPU), or the servers' flat optimizer
// on the host copy (host, or auto on the CPU). The errors of
// TensorOptimizer::Create.
Result<std::unique_ptr<LocalUpdate>> MakeLocalUpdate(
    const LocalRunOptions& options, const FlatParameters& flat);

}  // namespace strata
