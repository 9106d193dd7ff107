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
// per thread: make it on the thread that trains, once the model is placed
// (the placement's copies end in a blocking one, so nothing on the default
// stream is left for the new stream to race), and end it before the model
// goes: it waits for its stream's work first (memory the model frees is
// then reused safely from the default stream). The streams come from
// LibTorch's high-priority pool, apart from the low-priority one the
// gradients' side streams (FlatParameters) come from: 32 training threads
// on a GPU before two share a stream. Does nothing on the CPU (emulated
// buffers included: there are no streams there). Not movable.
class ComputeStream {
 public:
  explicit ComputeStream(const c10::Device& device);
  ~ComputeStream();
  ComputeStream(const ComputeStream&) = delete;
  ComputeStream& operator=(const ComputeStream&) = delete;
  // Whether a stream of its own is current (false on the CPU).
  bool on() const { return guard_.has_value(); }

 private:
  std::optional<c10::StreamGuard> guard_;
};

}  // namespace strata
