#include "models/precision.h"

#include <ATen/autocast_mode.h>

namespace strata {

Result<c10::ScalarType> ParsePrecision(const std::string& name) {
  if (name == "float32") return c10::ScalarType::Float;
  if (name == "bf16") return c10::ScalarType::BFloat16;
  return Status::InvalidArgument(
      "train.precision = \"{}\": not a precision (\"float32\" or \"bf16\")",
      name);
}

std::string PrecisionName(c10::ScalarType dtype) {
  return dtype == c10::ScalarType::BFloat16 ? "bf16" : "float32";
}

AutocastScope::AutocastScope(c10::DeviceType device, c10::ScalarType dtype) {
  if (dtype == c10::ScalarType::Float) return;
  on_ = true;
  cpu_ = device == c10::DeviceType::CPU;
  if (cpu_) {
    was_enabled_ = at::autocast::is_cpu_enabled();
    was_dtype_ = at::autocast::get_autocast_cpu_dtype();
    at::autocast::set_autocast_cpu_dtype(dtype);
    at::autocast::set_cpu_enabled(true);
  } else {
    was_enabled_ = at::autocast::is_enabled();
    was_dtype_ = at::autocast::get_autocast_gpu_dtype();
    at::autocast::set_autocast_gpu_dtype(dtype);
    at::autocast::set_enabled(true);
  }
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!on_) return;
  // The cached casts of the weights hold their values of this pass.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  if (cpu_) {
    at::autocast::set_cpu_enabled(was_enabled_);
    at::autocast::set_autocast_cpu_dtype(was_dtype_);
  } else {
    at::autocast::set_enabled(was_enabled_);
    at::autocast::set_autocast_gpu_dtype(was_dtype_);
  }
}

}  // namespace strata
