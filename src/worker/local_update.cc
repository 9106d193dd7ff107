#include "worker/local_update.h"

#include <torch/torch.h>

#include "worker/tensor_optimizer.h"

namespace strata {
namespace {

// The servers' flat optimizer on the host copy. On a GPU the gradients come
// back and the parameters go over at every step.
class HostUpdate final : public LocalUpdate {
 public:
  HostUpdate(const OptimizerOptions& o, int64_t size)
      : optimizer_(MakeOptimizer(o, size)) {}
  Status Step(FlatParameters& flat, double lr, PhaseMark& phase) override {
    try {
      phase.Next("strata::fetch_grads");
      flat.FetchGrads();
      phase.Next("strata::optimizer");
      optimizer_->Step(flat.param_data(), flat.grad_data(), lr);
      // Queued; the next step's FetchGrads waits for it before the
      // optimizer writes the host copy again.
      phase.Next("strata::upload");
      flat.Upload(/*wait=*/false);
    } catch (const c10::Error& e) {
      return Status::Internal("the update's copies to and from {}: {}",
                              flat.device().str(), e.what_without_backtrace());
    }
    return Status::Ok();
  }
  Status SyncHost(FlatParameters&) override { return Status::Ok(); }
  Result<OptimizerState> SaveState() const override {
    return optimizer_->SaveState();
  }
  Status RestoreState(const OptimizerState& state) override {
    return optimizer_->RestoreState(state);
  }
  const char* where() const override { return "host"; }

 private:
  std::unique_ptr<Optimizer> optimizer_;
};

// TensorOptimizer on the model's device: on a GPU, no parameter or gradient
// crosses to the host during training; the device copy is the current one.
class DeviceUpdate final : public LocalUpdate {
 public:
  explicit DeviceUpdate(std::unique_ptr<TensorOptimizer> optimizer)
      : optimizer_(std::move(optimizer)) {}
  Status Step(FlatParameters& flat, double lr, PhaseMark& phase) override {
    // Queued on the device after the backward pass.
    phase.Next("strata::optimizer");
    return optimizer_->Step(flat.compute_params(), flat.compute_grads(), lr);
  }
  Status SyncHost(FlatParameters& flat) override {
    // A failure of a kernel queued earlier surfaces at this wait.
    try {
      flat.DownloadParams();
    } catch (const c10::Error& e) {
      return Status::Internal("copying the parameters from {} to the host: {}",
                              flat.device().str(), e.what_without_backtrace());
    }
    return Status::Ok();
  }
  Result<OptimizerState> SaveState() const override {
    return optimizer_->SaveState();
  }
  Status RestoreState(const OptimizerState& state) override {
    return optimizer_->RestoreState(state);
  }
  const char* where() const override { return "device"; }

 private:
  std::unique_ptr<TensorOptimizer> optimizer_;
};

}  // namespace

Result<std::unique_ptr<LocalUpdate>> MakeLocalUpdate(
    const LocalRunOptions& options, const FlatParameters& flat) {
  const OptimizerOptions& o = options.optimizer;
  if (options.optimizer_on == LocalOptimizer::kTorch ||
      (options.optimizer_on == LocalOptimizer::kAuto && flat.on_device())) {
    ASSIGN_OR_RETURN(std::unique_ptr<TensorOptimizer> t,
                     TensorOptimizer::Create(o, flat.size(), flat.device()));
    return std::unique_ptr<LocalUpdate>(new DeviceUpdate(std::move(t)));
  }
  return std::unique_ptr<LocalUpdate>(new HostUpdate(o, flat.size()));
}

}  // namespace strata
