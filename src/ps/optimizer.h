#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/status.h"

namespace strata {

// Optimizer settings; the same struct drives the single-process trainer and
// the parameter servers, so both apply bit-for-bit the same update.
struct OptimizerOptions {
  enum class Kind { kSgd, kAdam };
  Kind kind = Kind::kSgd;
  double momentum = 0.0;
  bool nesterov = false;
  double weight_decay = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;

  // Reads train.optimizer, train.momentum, ... from a config.
  static OptimizerOptions FromConfig(const Config& config);
};

// Applies updates to one contiguous range of parameters, keeping that
// range's state (momentum buffer, Adam moments and step count). The rules
// are LibTorch's torch::optim::SGD (dampening 0) and torch::optim::Adam.
// Not thread-safe: one instance per key range, used by one thread at a time.
// Part of a gradient: `size` floats for parameters [offset, offset + size)
// of a range. A gradient that arrived in several network frames is a list of
// pieces that together cover the range once, in order.
struct FloatPiece {
  int64_t offset = 0;
  const float* data = nullptr;
  int64_t size = 0;
};

// What an optimizer carries from step to step (checkpoints): its buffers
// by name (SGD's "momentum"; Adam's "m" and "v"), each size() floats, and
// how many steps it has taken.
struct OptimizerState {
  std::map<std::string, std::vector<float>> buffers;
  int64_t steps = 0;

  // The buffer `name`, checked to hold `size` values. InvalidArgument
  // naming the buffer when it is missing (a state saved by another
  // optimizer) or of another size.
  Result<const std::vector<float>*> Buffer(const std::string& name,
                                           int64_t size) const;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual OptimizerState SaveState() const = 0;
  // Takes a state saved by an optimizer of the same kind and size.
  // InvalidArgument naming the buffer that is missing or of the wrong size.
  virtual Status RestoreState(const OptimizerState& state) = 0;
  // params[i] -= update(grads[i]) for i < size() with learning rate `lr`.
  void Step(float* params, const float* grads, double lr) {
    const FloatPiece whole{0, grads, size()};
    StepPieces(params, &whole, 1, lr);
  }
  // One step whose gradient is given in pieces (see FloatPiece) that cover
  // [0, size()) exactly once, in order: the same result as Step() on the
  // joined gradient, without joining it.
  virtual void StepPieces(float* params, const FloatPiece* pieces,
                          size_t num_pieces, double lr) = 0;
  virtual int64_t size() const = 0;
};

// An optimizer for a range of `size` parameters.
std::unique_ptr<Optimizer> MakeOptimizer(const OptimizerOptions& options,
                                         int64_t size);

}  // namespace strata
