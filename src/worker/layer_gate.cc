#include "worker/layer_gate.h"

#include <torch/torch.h>

#include <chrono>

#include "common/log.h"
#include "common/seconds.h"

namespace strata {

using Clock = std::chrono::steady_clock;

LayerGate::LayerGate(Model& model, Exchange& exchange, bool on)
    : model_(model), exchange_(exchange), on_(on) {
  if (!on_) return;
  model_.net->set_param_gate(
      PrefixGate(model_, [this](int64_t end) { Await(end); }));
}

LayerGate::~LayerGate() { model_.net->set_param_gate(nullptr); }

void LayerGate::Await(int64_t end) {
  const auto t = Clock::now();
  Status in = exchange_.AwaitParams(end);
  wait_s_ += Seconds(t, Clock::now());
  if (!in.ok()) {
    failed_ = true;
    throw ParamWaitError(std::move(in));
  }
  // GPU: the layer's kernels follow its parameters' copy on the same
  // stream. Nothing writes the range on the host before the step's push of
  // it, which waits for its gradient's copy, and that follows the forward
  // pass on the device.
  const int64_t to = end < 0 ? model_.flat.size() : end;
  if (to > uploaded_) {
    model_.flat.UploadRange(uploaded_, to - uploaded_);
    uploaded_ = to;
  }
  // Before the backward pass: the previous step's push may have read the
  // gradient buffer until every parameter was in (pipelined sync and async
  // take their acks here).
  if (end < 0) model_.flat.ZeroGrad();
}

int SliceLayers(Model& model, const ClusterRunOptions& o,
                const KeyLayout* layout, bool gate_on, int index) {
  if (!gate_on || model.flat.on_device() || layout == nullptr ||
      layout->num_ranges() <= 1)
    return 0;
  bool sliced_by_plan = false;
  for (const torch::Tensor& w : model.net->sliceable_weights())
    sliced_by_plan = sliced_by_plan || o.SlicesWeight(w.numel());
  if (!sliced_by_plan) return 0;
  std::vector<int64_t> cuts;
  for (const KeyRange& r : layout->ranges()) cuts.push_back(r.begin);
  const int slices = model.net->SliceLayers(model.flat.param_data(), cuts);
  if (slices > 0 && index == 0)
    LogDebug("worker 0: a layer computes in {} row slices", slices);
  return slices;
}

}  // namespace strata
