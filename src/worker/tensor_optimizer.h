#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>

#include "common/status.h"
#include "ps/optimizer.h"

namespace strata {

// The parameter servers' update rules (ps/optimizer.h: LibTorch's SGD with
// dampening 0, momentum, Nesterov and weight decay, and Adam) written as
// LibTorch tensor operations on one flat parameter tensor and its flat
// gradient, so that the update runs where they live: on a GPU, the single-
// process trainer no longer copies the gradients to the host and the
// parameters back at every step (docs/design/gpu.md). Its state (the momentum
// buffer, Adam's moments) is kept on that device.
//
// The result is the host optimizer's to float rounding, not bit for bit:
// LibTorch's kernels may compute `a + alpha * b` as one fused multiply-add
// (one rounding where the host loop rounds twice), and CUDA's do. Its state
// is saved and restored in the host optimizer's form (same buffer names and
// step count), so a checkpoint written with either resumes with the other.
// Other roundings differ too: LibTorch's CPU addcdiv computes
// (value * m) / denom where the host computes value * (m / denom), and CUDA
// divides by a scalar as a multiplication by its reciprocal.
// Not thread-safe: one thread steps it.
class TensorOptimizer {
 public:
  // An optimizer for `size` parameters on `device`. InvalidArgument if size
  // is negative; Internal if LibTorch cannot allocate the state there.
  static Result<std::unique_ptr<TensorOptimizer>> Create(
      const OptimizerOptions& options, int64_t size, torch::Device device);

  TensorOptimizer(const TensorOptimizer&) = delete;
  TensorOptimizer& operator=(const TensorOptimizer&) = delete;

  // params -= update(grads) with learning rate `lr`, in place. Both are
  // contiguous float32 tensors of size() elements on the optimizer's
  // device; `grads` is left as it was. Queued on the device's current
  // stream (it returns before a GPU has run it). InvalidArgument naming the
  // tensor that does not fit; Internal for a LibTorch failure (the
  // parameters and the state may then be half updated, the step count not).
  Status Step(torch::Tensor params, const torch::Tensor& grads, double lr);

  // The state as the host optimizer keeps it (waits for the device).
  // Internal if the device failed (a kernel queued earlier may report it
  // here).
  Result<OptimizerState> SaveState() const;
  // Takes a state saved by either optimizer of the same kind and size.
  // InvalidArgument naming the buffer that is missing or of the wrong size;
  // the optimizer is unchanged then.
  Status RestoreState(const OptimizerState& state);

  int64_t size() const { return size_; }

 private:
  TensorOptimizer(const OptimizerOptions& options, int64_t size,
                  torch::Device device);

  const OptimizerOptions o_;
  const int64_t size_;
  const torch::Device device_;
  torch::Tensor momentum_;  // SGD with momentum; undefined otherwise
  torch::Tensor m_, v_;     // Adam
  int64_t steps_ = 0;
};

}  // namespace strata
