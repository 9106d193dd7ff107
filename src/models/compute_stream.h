#pragma once

// A training thread's own CUDA stream, and its own backward passes
// (docs/design/gpu.md, "Streams").

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

// Whether this LibTorch can run a GPU's backward pass on the thread that
// starts it (LibTorch 2.0 and later: the thread-local switch PyTorch calls
// torch.autograd.set_multithreading_enabled).
bool OwnBackwardBuilt();

// While it lives, the backward passes the calling thread starts on a GPU's
// tensors run on that thread instead of on LibTorch's autograd thread for
// the GPU. That thread is one per GPU in a process: every worker that is a
// thread of the process would launch its backward kernels through it, one
// after the other. The kernels still go to each forward operator's stream
// (the ComputeStream), and gradient hooks run on the calling thread, as on
// the CPU, where backward passes always run on the calling thread. Does
// nothing where `on` is false, on the CPU (emulated buffers included) and
// before LibTorch 2.0. Gives the thread its previous setting back when it
// ends. Make it on the thread that trains. Not movable.
class OwnBackward {
 public:
  OwnBackward(const c10::Device& device, bool on);
  ~OwnBackward();
  OwnBackward(const OwnBackward&) = delete;
  OwnBackward& operator=(const OwnBackward&) = delete;
  // Whether this thread's backward passes run on it because of this.
  bool on() const { return on_; }

 private:
  bool on_ = false;
  bool was_ = true;  // the thread's setting before
};

}  // namespace strata
