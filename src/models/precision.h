#pragma once

// Mixed precision (train.precision; docs/guide/training.md, "Precision"):
// the forward pass under LibTorch's autocast, on the CPU or a GPU. Matrix
// products and convolutions compute in bfloat16; the parameters, their
// gradients, the optimizer and everything workers exchange stay float32
// (autocast casts a float32 weight for the operator and the backward pass
// casts its gradient back).

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include <string>

#include "common/status.h"

namespace strata {

// The type train.precision names: "float32" (no autocast) or "bf16";
// InvalidArgument naming the key for anything else.
Result<c10::ScalarType> ParsePrecision(const std::string& name);
// "float32" or "bf16".
std::string PrecisionName(c10::ScalarType dtype);

// Whether autocast is on for `device`'s kind on this thread (LibTorch's
// switch, whichever form this LibTorch has: 2.4 takes the device type).
bool AutocastEnabled(c10::DeviceType device);

// While it lives, operators on `device`'s kind run under autocast to `dtype`
// on this thread (autocast is per thread); float32 does nothing. The weight
// casts it caches are dropped when the outermost scope ends, so a scope per
// forward pass sees the weights as the last update left them. Not movable.
class AutocastScope {
 public:
  AutocastScope(c10::DeviceType device, c10::ScalarType dtype);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool on_ = false;
  c10::DeviceType device_ = c10::DeviceType::CPU;  // CPU or CUDA
  bool was_enabled_ = false;
  c10::ScalarType was_dtype_ = c10::ScalarType::Float;
};

}  // namespace strata
