#include "models/flat_parameters.h"

#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <thread>

namespace strata {

// The GPU side: the buffers the module's parameters and gradients are views
// of, the side stream the gradient copies run on, and per parameter the
// events that order its copy after its gradient and mark the copy done.
// Emulated on the CPU: the buffers only (no stream, no events; every copy
// is done when its call returns).
struct FlatParameters::DeviceState {
  torch::Tensor params;
  torch::Tensor grads;
  std::optional<c10::Stream> side;
  std::vector<int64_t> offsets;  // slot starts, ascending
  std::vector<std::unique_ptr<c10::Event>> ready;
  std::vector<std::unique_ptr<c10::Event>> done;
  // Per slot, this step: whether MarkGradsReady recorded its `ready` event
  // (the copy is WaitGrads's). Cleared by ZeroGrad.
  std::unique_ptr<std::atomic<bool>[]> marked;
};

Result<FlatParameters> FlatParameters::Bind(torch::nn::Module& module,
                                            torch::Device device,
                                            bool emulate_device) {
  FlatParameters flat;
  flat.device_ = device;
  auto named = module.named_parameters(/*recurse=*/true);
  int64_t total = 0;
  for (const auto& item : named) {
    const torch::Tensor& p = item.value();
    if (p.scalar_type() != torch::kFloat32 || p.device() != device) {
      return Status::InvalidArgument(
          "parameter '{}' is not a float32 tensor on {} (it is {} on {})",
          item.key(), device.str(), std::string(c10::toString(p.scalar_type())),
          p.device().str());
    }
    flat.slots_.push_back(Slot{item.key(), total, p.numel(), p.sizes().vec()});
    total += p.numel();
  }
  flat.size_ = total;
  torch::Tensor bound_params, bound_grads;
  try {
    // The host copy: pinned on a GPU, so that copies to and from it can be
    // asynchronous.
    const bool gpu = !device.is_cpu();
    auto host =
        torch::TensorOptions().dtype(torch::kFloat32).pinned_memory(gpu);
    flat.params_ = torch::empty({total}, host);
    flat.grads_ = torch::zeros({total}, host);
    bound_params = flat.params_;
    bound_grads = flat.grads_;
    if (gpu || emulate_device) {
      auto dev = std::make_shared<DeviceState>();
      auto on = torch::TensorOptions().dtype(torch::kFloat32).device(device);
      dev->params = torch::empty({total}, on);
      dev->grads = torch::zeros({total}, on);
      if (gpu) {
        c10::impl::VirtualGuardImpl impl(device.type());
        dev->side = impl.getStreamFromGlobalPool(device);
        for (const Slot& slot : flat.slots_) {
          dev->offsets.push_back(slot.offset);
          dev->ready.push_back(std::make_unique<c10::Event>(device.type()));
          dev->done.push_back(std::make_unique<c10::Event>(device.type()));
        }
        dev->marked.reset(new std::atomic<bool>[flat.slots_.size()]);
        for (size_t i = 0; i < flat.slots_.size(); ++i) dev->marked[i] = false;
      }
      bound_params = dev->params;
      bound_grads = dev->grads;
      flat.dev_ = std::move(dev);
    }
    torch::NoGradGuard no_grad;
    size_t i = 0;
    for (auto& item : named) {
      torch::Tensor& p = item.value();
      const Slot& slot = flat.slots_[i++];
      torch::Tensor pv =
          bound_params.narrow(0, slot.offset, slot.numel).view(p.sizes());
      pv.copy_(p);
      p.set_data(pv);
      p.mutable_grad() =
          bound_grads.narrow(0, slot.offset, slot.numel).view(p.sizes());
    }
    flat.DownloadParams();
  } catch (const c10::Error& e) {
    return Status::Internal("binding the parameters on {}: {}", device.str(),
                            e.what_without_backtrace());
  }
  return flat;
}

bool FlatParameters::IsBound(torch::nn::Module& module) const {
  const torch::Tensor& params = dev_ ? dev_->params : params_;
  const torch::Tensor& grads = dev_ ? dev_->grads : grads_;
  size_t i = 0;
  for (const auto& item : module.named_parameters(true)) {
    if (i >= slots_.size()) return false;
    const Slot& slot = slots_[i++];
    const torch::Tensor& p = item.value();
    if (p.data_ptr<float>() != params.data_ptr<float>() + slot.offset)
      return false;
    const torch::Tensor& g = p.grad();
    if (!g.defined() ||
        g.data_ptr<float>() != grads.data_ptr<float>() + slot.offset)
      return false;
  }
  return i == slots_.size();
}

torch::Tensor FlatParameters::compute_params() const {
  return dev_ ? dev_->params : params_;
}

torch::Tensor FlatParameters::compute_grads() const {
  return dev_ ? dev_->grads : grads_;
}

void FlatParameters::ZeroGrad(bool host_mirror) {
  if (!dev_) {
    grads_.zero_();
    return;
  }
  if (host_mirror) grads_.zero_();
  dev_->grads.zero_();
  if (dev_->marked) {
    for (size_t i = 0; i < slots_.size(); ++i) dev_->marked[i] = false;
  }
}

void FlatParameters::Upload(bool wait) {
  if (dev_) dev_->params.copy_(params_, /*non_blocking=*/!wait);
}

void FlatParameters::UploadRange(int64_t offset, int64_t count) {
  if (!dev_ || count <= 0) return;
  dev_->params.narrow(0, offset, count)
      .copy_(params_.narrow(0, offset, count), /*non_blocking=*/true);
}

void FlatParameters::DownloadParams() {
  if (dev_) params_.copy_(dev_->params);
}

void FlatParameters::FetchGrads() {
  if (dev_) grads_.copy_(dev_->grads);
}

size_t FlatParameters::SlotAt(int64_t offset) const {
  auto it =
      std::upper_bound(dev_->offsets.begin(), dev_->offsets.end(), offset);
  return static_cast<size_t>(it - dev_->offsets.begin()) - 1;
}

size_t FlatParameters::RecordReady(int64_t offset) {
  const size_t slot = SlotAt(offset);
  c10::impl::VirtualGuardImpl impl(device_.type());
  dev_->ready[slot]->record(impl.getStream(device_));
  return slot;
}

void FlatParameters::CopyGradsOnSide(int64_t offset, int64_t count) {
  c10::StreamGuard on_side(*dev_->side);
  grads_.narrow(0, offset, count)
      .copy_(dev_->grads.narrow(0, offset, count), /*non_blocking=*/true);
}

void FlatParameters::DownloadGrads(int64_t offset, int64_t count) {
  if (!dev_ || count <= 0) return;
  if (!dev_->side) {  // emulated: copied by the time anyone waits
    grads_.narrow(0, offset, count).copy_(dev_->grads.narrow(0, offset, count));
    return;
  }
  // The copy waits for what the current stream has queued (the gradient),
  // but not the other way round: the backward pass goes on meanwhile.
  const size_t slot = RecordReady(offset);
  dev_->ready[slot]->block(*dev_->side);
  CopyGradsOnSide(offset, count);
  dev_->done[slot]->record(*dev_->side);
}

void FlatParameters::MarkGradsReady(int64_t offset, int64_t count) {
  if (dev_ && !dev_->side) return DownloadGrads(offset, count);  // emulated
  if (!dev_ || count <= 0) return;
  // After what the current stream has queued: the gradient's accumulation.
  dev_->marked[RecordReady(offset)] = true;
}

void FlatParameters::WaitGrads(int64_t offset, int64_t count) {
  if (!dev_ || !dev_->side || count <= 0) return;
  bool copy = false;
  for (size_t slot = SlotAt(offset);
       slot < dev_->offsets.size() && dev_->offsets[slot] < offset + count;
       ++slot) {
    if (dev_->marked[slot]) {
      // Marked: the range's one copy below follows its gradient.
      dev_->ready[slot]->block(*dev_->side);
      copy = true;
    } else {
      // A copy DownloadGrads started (copies on the side stream finish in
      // order); an event never recorded (a parameter without a gradient
      // this step) reads as done.
      while (!dev_->done[slot]->query()) std::this_thread::yield();
    }
  }
  if (!copy) return;
  // The whole range at once. Its unmarked floats are copied too: a
  // marked slot's event follows this step's ZeroGrad on the compute
  // stream, so they read as what the host mirror holds (zero, or the same
  // gradient DownloadGrads brought).
  CopyGradsOnSide(offset, count);
  // An event of its own: a reducer's thread and the worker's may each be
  // waiting for a range.
  c10::Event copied(device_.type());
  copied.record(*dev_->side);
  while (!copied.query()) std::this_thread::yield();
}

}  // namespace strata
