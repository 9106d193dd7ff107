#include "worker/step_graph.h"

#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/torch.h>

namespace strata {

Result<StepResult> StepGraph::Step(const Batch& batch,
                                   std::vector<float>* example_losses) {
  ++steps_;
  std::vector<int64_t> shape = batch.inputs.sizes().vec();
  const bool losses = example_losses != nullptr;
  if (graph_ != nullptr) {
    if (shape == shape_ && losses == losses_)
      return Replay(batch, example_losses);
    return Eager(batch, example_losses);
  }
  if (++eager_[shape] <= kWarmupSteps) return Eager(batch, example_losses);
  shape_ = std::move(shape);
  losses_ = losses;
  RETURN_IF_ERROR(Capture(batch));
  captured_at_ = steps_;
  return Replay(batch, example_losses);
}

Status StepGraph::Capture(const Batch& batch) {
  const torch::Device device = DeviceOf(net_);
  ASSIGN_OR_RETURN(std::unique_ptr<CudaGraph> graph, CudaGraph::Create());
  try {
    inputs_ = torch::empty_like(batch.inputs, torch::TensorOptions(device));
    targets_ = torch::empty_like(batch.targets, torch::TensorOptions(device));
    // The eager steps' work is done before the capture begins.
    c10::impl::VirtualGuardImpl impl(device.type());
    impl.getStream(device).synchronize();
  } catch (const c10::Error& e) {
    return Status::Internal("CUDA graph: the static inputs on {}: {}",
                            device.str(), e.what_without_backtrace());
  }
  const Status captured = graph->Capture([&] {
    out_ = ForwardBackwardOnDevice(net_, inputs_, targets_, losses_);
  });
  if (captured.code() == Status::Code::kInternal) {
    return Status::Internal(
        "{} (the step's capture failed; set train.cuda_graph = false to "
        "train without one)",
        captured.message());
  }
  RETURN_IF_ERROR(captured);
  graph_ = std::move(graph);
  return Status::Ok();
}

Result<StepResult> StepGraph::Eager(const Batch& batch,
                                    std::vector<float>* example_losses) {
  Result<StepResult> step = Status::Internal("the eager step did not run");
  RETURN_IF_ERROR(OutsideCaptures(
      [&] { step = ForwardBackward(net_, batch, example_losses); }));
  return step;
}

Result<StepResult> StepGraph::Replay(const Batch& batch,
                                     std::vector<float>* example_losses) {
  try {
    inputs_.copy_(batch.inputs, /*non_blocking=*/true);
    targets_.copy_(batch.targets, /*non_blocking=*/true);
    RETURN_IF_ERROR(graph_->Replay());
    ++replays_;
    return ReadStep(out_, batch.targets.size(0), example_losses);
  } catch (const c10::Error& e) {
    return Status::Internal("CUDA graph: replaying the step: {}",
                            e.what_without_backtrace());
  }
}

DeviceStep::DeviceStep(ClassifierImpl& net, const torch::Device& device,
                       const DeviceOptions& options)
    : net_(net),
      stream_(device),
      backward_(device, options.own_backward),
      graph_(options.cuda_graph ? std::make_unique<StepGraph>(net) : nullptr) {}

Result<StepResult> DeviceStep::Run(const Batch& batch,
                                   std::vector<float>* example_losses) {
  if (graph_ != nullptr) return graph_->Step(batch, example_losses);
  return ForwardBackward(net_, batch, example_losses);
}

}  // namespace strata
