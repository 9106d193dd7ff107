#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace strata {

// Lays every parameter of a module, in registration order, into one
// contiguous float32 vector, and every gradient into a second one: after
// Bind() each parameter's data and its .grad() are views into these buffers,
// so pushing gradients or pulling parameters needs no copy, and autograd
// accumulates straight into grads(). Buffers (BatchNorm running statistics)
// are not parameters and are not included.
// Not thread-safe. Movable; the module must outlive it.
class FlatParameters {
 public:
  // Where one parameter sits in the flat vector.
  struct Slot {
    std::string name;
    int64_t offset;
    int64_t numel;
    std::vector<int64_t> shape;
  };

  FlatParameters() = default;

  // Copies the module's current parameter values into a new flat vector and
  // rebinds parameters and gradients as views. InvalidArgument if a
  // parameter is not a float32 CPU tensor.
  static Result<FlatParameters> Bind(torch::nn::Module& module);

  int64_t size() const { return size_; }
  float* param_data() { return params_.data_ptr<float>(); }
  float* grad_data() { return grads_.data_ptr<float>(); }
  const float* param_data() const { return params_.data_ptr<float>(); }
  const float* grad_data() const { return grads_.data_ptr<float>(); }
  torch::Tensor params() const { return params_; }
  torch::Tensor grads() const { return grads_; }
  const std::vector<Slot>& slots() const { return slots_; }
  // Sets every gradient to zero (in place: the views stay bound).
  void ZeroGrad() { grads_.zero_(); }
  // True if every parameter of `module` still aliases this vector (a
  // LibTorch call that replaces .grad or .data breaks the binding).
  bool IsBound(torch::nn::Module& module) const;

 private:
  torch::Tensor params_;
  torch::Tensor grads_;
  int64_t size_ = 0;
  std::vector<Slot> slots_;
};

}  // namespace strata
