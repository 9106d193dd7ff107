#pragma once

// train.cuda_graph (docs/design/gpu.md, "CUDA graphs").

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "common/status.h"
#include "models/compute_stream.h"
#include "models/cuda_graph.h"
#include "models/model_options.h"
#include "models/models.h"
#include "worker/batch.h"

namespace strata {

// A training step's forward and backward pass on a GPU, captured once as a
// CUDA graph and replayed: ForwardBackward's contract, with one launch per
// step instead of one per kernel (a small model at a small batch is bound
// by kernel launches, not by the GPU).
//
// The first kWarmupSteps steps of a batch shape (counted over the run, so
// an epoch's shorter last batch in between does not start the count again)
// run eagerly (LibTorch's lazy set-up, cuDNN's algorithm search); the next
// is captured on the calling thread's ComputeStream, reading its batch from
// static device tensors, and replayed at once, and so is every later step
// of that shape: the batch is copied into the static tensors, the graph
// launched, and the loss, accuracy (and example losses) read from its
// outputs. A batch of another shape (an epoch's last, shorter one) runs
// eagerly. The training threads of a process (every worker, on whichever
// GPU) capture one at a time: their eager steps and replays run outside the
// others' captures (models/cuda_graph.h, OutsideCaptures).
//
// What the graph holds: the kernels between the inputs and the gradients.
// The caller's work around it stays outside, as without a graph: zeroing
// the gradients, the parameters' upload, the exchange or the update, each a
// few launches on the flat buffers. So the graph stays valid while the
// parameters change (it reads them where they are) and while the learning
// rate changes (the update is not in it). Nothing in it may wait on the host
// between layers: cluster.layer_wait, pipelining's per-range hooks and
// bucket_overlap are off with train.cuda_graph (run/options.cc).
class StepGraph {
 public:
  static constexpr int kWarmupSteps = 3;

  // `net` computes on a GPU, and a ComputeStream is current on the calling
  // thread for the graph's life.
  explicit StepGraph(ClassifierImpl& net) : net_(net) {}
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // One step (the caller zeroes the gradients before it). Internal for a
  // failed capture or replay, naming it.
  Result<StepResult> Step(const Batch& batch,
                          std::vector<float>* example_losses);
  // The step (counted from 1) that was captured; 0 before.
  int64_t captured_at() const { return captured_at_; }
  // The steps that ran as a replay of the graph.
  int64_t replays() const { return replays_; }

 private:
  // Records the graph for `batch`'s shape.
  Status Capture(const Batch& batch);
  // ForwardBackward, outside other threads' captures (OutsideCaptures).
  Result<StepResult> Eager(const Batch& batch,
                           std::vector<float>* example_losses);
  Result<StepResult> Replay(const Batch& batch,
                            std::vector<float>* example_losses);

  ClassifierImpl& net_;
  std::unique_ptr<CudaGraph> graph_;
  torch::Tensor inputs_, targets_;  // the graph's static inputs
  StepTensors out_;                 // and its outputs
  std::vector<int64_t> shape_;      // the captured shape
  bool losses_ = false;             // whether the graph computes example losses
  std::map<std::vector<int64_t>, int> eager_;  // eager steps by shape
  int64_t steps_ = 0, captured_at_ = 0, replays_ = 0;
};

// The forward and backward pass of a thread that trains `net` (the local
// trainer, a worker): on a GPU on a stream of its own (ComputeStream), the
// backward pass run by the thread itself with train.gpu_backward =
// own_thread (OwnBackward), and with train.cuda_graph through a StepGraph;
// ForwardBackward otherwise. Make it once the model is placed on `device`,
// on the thread that trains; end it before the model goes. `options`: its
// cuda_graph and own_backward.
class DeviceStep {
 public:
  DeviceStep(ClassifierImpl& net, const torch::Device& device,
             const DeviceOptions& options);
  // ForwardBackward's contract.
  Result<StepResult> Run(const Batch& batch,
                         std::vector<float>* example_losses);
  // The captured step; null without train.cuda_graph.
  const StepGraph* graph() const { return graph_.get(); }

 private:
  ClassifierImpl& net_;
  ComputeStream stream_;
  OwnBackward backward_;
  std::unique_ptr<StepGraph> graph_;
};

}  // namespace strata
