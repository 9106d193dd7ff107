#include "models/compute_stream.h"

#include <c10/core/AutogradState.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/version.h>

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

bool OwnBackwardBuilt() { return TORCH_VERSION_MAJOR >= 2; }

OwnBackward::OwnBackward(const c10::Device& device, bool on) {
#if TORCH_VERSION_MAJOR >= 2
  if (!on || device.is_cpu()) return;
  // Without "multithreading", LibTorch's engine queues every node of a
  // backward pass on the calling thread's queue, as it does a CPU's.
  c10::AutogradState& state = c10::AutogradState::get_tls_state();
  was_ = state.get_multithreading_enabled();
  state.set_multithreading_enabled(false);
  on_ = true;
#else
  (void)device;
  (void)on;
#endif
}

OwnBackward::~OwnBackward() {
#if TORCH_VERSION_MAJOR >= 2
  if (on_) c10::AutogradState::get_tls_state().set_multithreading_enabled(was_);
#endif
}

}  // namespace strata
