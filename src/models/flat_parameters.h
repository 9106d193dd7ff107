#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
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
//
// On a GPU (Bind with a CUDA device; the module's parameters must be there
// already) the module's parameters and gradients are views into two flat
// device buffers, and params()/grads() and the *_data() pointers are host
// mirrors of them in pinned memory: what the parameter-server client and
// the exchange strategies read and write. The host parameters are the
// authoritative copy (a pull writes them; the one exception is the local
// trainer updating compute_params() on the device, which calls
// DownloadParams() when it needs the host copy); Upload() copies them to the
// device before the forward pass. FetchGrads() copies the gradients back
// after the backward pass; during it, DownloadGrads() starts the copy of one
// parameter's range on a side stream as soon as autograd has accumulated it
// and WaitGrads() waits for a range (layer-wise pipelining). On the CPU
// these are no-ops: there is one buffer of each, unless Bind was asked to
// emulate a device's buffers there (below).
// Not thread-safe, except DownloadGrads() and MarkGradsReady() (the
// backward pass's thread) and WaitGrads() (a reducer's threads), provided a
// parameter's DownloadGrads() or MarkGradsReady() happens before any
// WaitGrads() of its range (the pipelining reducer's lock orders them: a
// range is taken only after its gradients reported).
// Movable; the module must outlive it.
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
  // parameter is not a float32 tensor on `device` (the CPU, or a GPU).
  // With emulate_device on the CPU (train.emulate_gpu_buffers), the module
  // computes in buffers apart from the host copy, as on a GPU, and every
  // copy call above moves data between them (at once: there are no streams
  // to wait for): the GPU's data path, checkable without a GPU. Ignored on
  // a GPU.
  static Result<FlatParameters> Bind(torch::nn::Module& module,
                                     torch::Device device = torch::kCPU,
                                     bool emulate_device = false);

  int64_t size() const { return size_; }
  float* param_data() { return params_.data_ptr<float>(); }
  float* grad_data() { return grads_.data_ptr<float>(); }
  const float* param_data() const { return params_.data_ptr<float>(); }
  const float* grad_data() const { return grads_.data_ptr<float>(); }
  torch::Tensor params() const { return params_; }
  torch::Tensor grads() const { return grads_; }
  // The buffers the module computes with: the device ones on a GPU (not
  // synchronized with the host mirrors; see Upload() and DownloadParams()),
  // params() and grads() on the CPU.
  torch::Tensor compute_params() const;
  torch::Tensor compute_grads() const;
  const std::vector<Slot>& slots() const { return slots_; }
  // Sets every gradient to zero (in place: the views stay bound; on a GPU
  // the host mirror too, so that a parameter that gets no gradient in a
  // step reads zero there; with host_mirror = false only the device's, for
  // a caller that never reads the host gradients before a FetchGrads(), as
  // the single-process trainer).
  void ZeroGrad(bool host_mirror = true);
  // The device the module computes on.
  torch::Device device() const { return device_; }
  // Whether the module computes in buffers apart from the host copy: on a
  // GPU, or emulating one on the CPU.
  bool on_device() const { return dev_ != nullptr; }
  // Whether it computes on a GPU (CUDA streams, a GPU profile).
  bool on_gpu() const { return !device_.is_cpu(); }
  // With device buffers (on_device(); no-ops otherwise; emulated on the
  // CPU, each copy is done when its call returns and WaitGrads does
  // nothing). Upload: host parameters to the device on
  // the current stream; with wait = false it returns at once (the forward
  // pass is queued after it), and the host parameters must not be written
  // until something waits for that stream (the caller's job: the worker
  // loop's backward pass and gradient copies do). FetchGrads: every
  // gradient to the host, waiting for it.
  // DownloadGrads: starts copying the gradient floats [offset, offset +
  // count) of one parameter to the host. MarkGradsReady: only marks that
  // parameter's gradient final (one event on the current stream; an
  // autograd hook's whole work, on the thread that runs the backward pass:
  // the worker's own, or autograd's device thread, which every worker of a
  // process shares, with train.gpu_backward = autograd_thread); the copy is
  // WaitGrads's. WaitGrads: waits
  // until every started copy that overlaps [offset, offset + count) is
  // done, and if a parameter there was marked, copies the whole range
  // after the marked gradients (one copy per range, on the caller's
  // thread) and waits for it. MarkGradsReady's marks last until ZeroGrad.
  // DownloadParams: device parameters to the host, waiting for it.
  // UploadRange: Upload(wait = false) of the floats [offset, offset +
  // count) only (the forward pass waiting layer by layer).
  void Upload(bool wait = true);
  void UploadRange(int64_t offset, int64_t count);
  void FetchGrads();
  void DownloadGrads(int64_t offset, int64_t count);
  void MarkGradsReady(int64_t offset, int64_t count);
  void WaitGrads(int64_t offset, int64_t count);
  void DownloadParams();
  // True if every parameter of `module` still aliases this vector (a
  // LibTorch call that replaces .grad or .data breaks the binding).
  bool IsBound(torch::nn::Module& module) const;

 private:
  struct DeviceState;
  // The slot holding float `offset` (a GPU's events; not emulated).
  size_t SlotAt(int64_t offset) const;
  // A GPU's: records the `ready` event of the slot holding `offset` on the
  // current stream (after the gradient queued there), and returns the slot.
  size_t RecordReady(int64_t offset);
  // A GPU's: queues the gradient floats [offset, offset + count) to the
  // host mirror on the side stream (after whatever it was made to wait for).
  void CopyGradsOnSide(int64_t offset, int64_t count);
  torch::Tensor params_;  // host (the module's own on the CPU)
  torch::Tensor grads_;
  torch::Device device_ = torch::kCPU;
  std::shared_ptr<DeviceState> dev_;  // on_device() only
  int64_t size_ = 0;
  std::vector<Slot> slots_;
};

}  // namespace strata
