#pragma once

#include <cstdint>

#include "exchange/exchange.h"
#include "models/models.h"
#include "run/options.h"

namespace strata {

// The forward pass's gate (cluster.layer_wait, docs/design/cluster.md):
// a built-in model's forward pass may start while a pull is still
// arriving, each layer waiting for its own parameters (the strategy's
// AwaitParams). On a GPU each layer's parameters are then queued for upload
// as they arrive, ahead of that layer's kernels. The time the forward pass
// waited is communication, not compute (wait_s). Installed on construction
// when `on`; cleared on destruction (the gate points at the exchange). Not
// thread-safe: the worker's thread only; `model` and `exchange` outlive it.
class LayerGate {
 public:
  LayerGate(Model& model, Exchange& exchange, bool on);
  ~LayerGate();
  LayerGate(const LayerGate&) = delete;
  LayerGate& operator=(const LayerGate&) = delete;

  bool on() const { return on_; }
  // Before each step's forward pass: nothing waited for, nothing uploaded.
  void BeginStep() {
    wait_s_ = 0;
    uploaded_ = 0;
  }
  // Seconds this step's forward pass waited for parameters.
  double wait_s() const { return wait_s_; }
  // Whether this step's forward pass stopped on a failed wait.
  bool failed() const { return failed_; }

 private:
  void Await(int64_t end);

  Model& model_;
  Exchange& exchange_;
  const bool on_;
  double wait_s_ = 0;
  bool failed_ = false;
  // GPU: the floats of the host copy uploaded so far this step (a prefix).
  int64_t uploaded_ = 0;
};

// P3-style row slices of the large layers (cluster.slice_kb), cut at the
// key layout's range bounds: each slice's gradient leaves as soon as the
// backward pass has it, and the next forward pass starts on a slice once
// its range is back. Only a layer the plan cut at its rows for that
// (ClusterPlan::Shape: larger than cluster.slice_kb; a server's share may
// end inside a smaller one, which stays whole), only with the gate on, and
// not on a GPU (its kernels take the layer whole, docs/design/gpu.md).
// Returns the number of slices made (0: none).
int SliceLayers(Model& model, const ClusterRunOptions& options,
                const KeyLayout* layout, bool gate_on, int index);

}  // namespace strata
