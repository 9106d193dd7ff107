#pragma once

// A training thread's own CUDA stream (docs/design/gpu.md, "Streams").

#include <c10/core/Device.h>
#include <c10/core/StreamGuard.h>

#include <optional>

namespace strata {

// While it lives, the calling thread queues its work for `device` on a
// stream of its own (one of LibTorch's pool streams) instead of the
// device's default stream: several workers sharing a GPU then run their
// kernels side by side, and a CUDA graph (models/cuda_graph.h) can be
// captured (capture refuses the default stream). The current stream is
// per thread: make it on the thread that trains, before the model is
// placed. Does nothing on the CPU (emulated buffers included: there are no
// streams there). Not movable.
class ComputeStream {
 public:
  explicit ComputeStream(const c10::Device& device);
  ComputeStream(const ComputeStream&) = delete;
  ComputeStream& operator=(const ComputeStream&) = delete;
  // Whether a stream of its own is current (false on the CPU).
  bool on() const { return guard_.has_value(); }

 private:
  std::optional<c10::StreamGuard> guard_;
};

}  // namespace strata
