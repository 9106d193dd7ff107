#include "models/compute_stream.h"

#include <c10/core/impl/VirtualGuardImpl.h>

namespace strata {

ComputeStream::ComputeStream(const c10::Device& device) {
  if (device.is_cpu()) return;
  // Through the device's registered guard: no CUDA header here (the pool is
  // CUDA's own: streams made with cudaStreamNonBlocking, handed out in turn).
  c10::impl::VirtualGuardImpl impl(device.type());
  const c10::Device d =
      device.has_index() ? device : c10::Device(device.type(), 0);
  guard_.emplace(impl.getStreamFromGlobalPool(d, /*isHighPriority=*/true));
}

ComputeStream::~ComputeStream() {
  if (!guard_) return;
  try {
    guard_->current_stream().synchronize();
  } catch (...) {
    // A device error surfaced here was the step's to report; nothing is
    // left to wait for on a failed device.
  }
}

}  // namespace strata
