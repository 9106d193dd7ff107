#include "models/precision.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

// LibTorch 2.4 replaced the per-device autocast switches (set_cpu_enabled,
// set_enabled for CUDA, ...) by ones that take the device type, and keeps
// the old ones only as deprecated wrappers.
#if TORCH_VERSION_MAJOR > 2 || \
    (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define STRATA_AUTOCAST_BY_DEVICE 1
#endif

namespace strata {

bool AutocastEnabled(c10::DeviceType device) {
#ifdef STRATA_AUTOCAST_BY_DEVICE
  return at::autocast::is_autocast_enabled(device);
#else
  return device == c10::DeviceType::CPU ? at::autocast::is_cpu_enabled()
                                        : at::autocast::is_enabled();
#endif
}

namespace {

void SetAutocast(c10::DeviceType device, bool on) {
#ifdef STRATA_AUTOCAST_BY_DEVICE
  at::autocast::set_autocast_enabled(device, on);
#else
  if (device == c10::DeviceType::CPU) {
    at::autocast::set_cpu_enabled(on);
  } else {
    at::autocast::set_enabled(on);
  }
#endif
}

c10::ScalarType AutocastType(c10::DeviceType device) {
#ifdef STRATA_AUTOCAST_BY_DEVICE
  return at::autocast::get_autocast_dtype(device);
#else
  return device == c10::DeviceType::CPU
             ? at::autocast::get_autocast_cpu_dtype()
             : at::autocast::get_autocast_gpu_dtype();
#endif
}

void SetAutocastType(c10::DeviceType device, c10::ScalarType dtype) {
#ifdef STRATA_AUTOCAST_BY_DEVICE
  at::autocast::set_autocast_dtype(device, dtype);
#else
  if (device == c10::DeviceType::CPU) {
    at::autocast::set_autocast_cpu_dtype(dtype);
  } else {
    at::autocast::set_autocast_gpu_dtype(dtype);
  }
#endif
}

}  // namespace

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
  device_ = device == c10::DeviceType::CPU ? device : c10::DeviceType::CUDA;
  was_enabled_ = AutocastEnabled(device_);
  was_dtype_ = AutocastType(device_);
  SetAutocastType(device_, dtype);
  SetAutocast(device_, true);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!on_) return;
  // The cached casts of the weights hold their values of this pass.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  SetAutocast(device_, was_enabled_);
  SetAutocastType(device_, was_dtype_);
}

}  // namespace strata
