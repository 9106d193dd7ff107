#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "common/status.h"
#include "exchange/bucket_reducer.h"
#include "models/models.h"

namespace torch::autograd {
struct Node;
}  // namespace torch::autograd

namespace strata {

// Routes the backward pass's gradients to an exchange strategy's
// GradientSink (exchange/bucket_reducer.h), so communication overlaps the
// backward pass: a tensor hook hands over each gradient before it is
// accumulated into .grad; a sink that works in place is told after the
// accumulation instead (a post hook on the parameter's gradient
// accumulator, as PyTorch DDP's reducer does), so the gradient is read
// where it lies, in the flat buffer. A sliced weight (cluster.slice_kb)
// reports its row slices itself. On a GPU, each hook first starts its
// gradient's copy to the host mirror. The hooks are removed on
// destruction. Not thread-safe; `model` and the sink outlive it.
class GradientHooks {
 public:
  // Internal naming the parameter when one has no slot in the flat vector
  // or no gradient accumulator.
  static Result<std::unique_ptr<GradientHooks>> Install(Model& model,
                                                        GradientSink* sink);
  ~GradientHooks();
  GradientHooks(const GradientHooks&) = delete;
  GradientHooks& operator=(const GradientHooks&) = delete;

 private:
  explicit GradientHooks(Model& model) : model_(model) {}
  // One parameter's hook at [offset, offset + numel) of the flat vector.
  Status Hook(torch::Tensor p, const std::string& name, int64_t offset,
              int64_t numel, GradientSink* sink);

  Model& model_;
  std::vector<std::pair<torch::Tensor, unsigned>> hooks_;
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, uintptr_t>>
      post_hooks_;
};

}  // namespace strata
