#pragma once

#include <torch/types.h>

#include <cstdint>
#include <random>
#include <vector>

#include "data/dataset.h"
#include "models/models.h"

namespace strata {

// One mini-batch as tensors: inputs [N, C, H, W] float32, targets [N] int64.
struct Batch {
  torch::Tensor inputs;
  torch::Tensor targets;
};

// Gathers examples by index into reusable batch buffers (no allocation per
// step once the largest batch was seen), optionally with CIFAR-style
// augmentation (random crop with padding 4, horizontal flip). Not
// thread-safe: one Batcher per training thread.
class Batcher {
 public:
  Batcher(const Dataset& data, bool augment, uint64_t seed);
  // The returned tensors alias the Batcher's buffers: valid until the next
  // call.
  Batch Gather(const std::vector<int64_t>& indices);
  // The same from `n` examples already in a row-major block (a batch the
  // data service sent): copied into the buffers, augmented as Gather does.
  Batch FromRows(const float* features, const int64_t* labels, int64_t n);
  // On a GPU: the buffers in pinned memory from the next batch on, so that
  // the batch's copy to the device is a DMA the host need not stage. The
  // copy is then asynchronous: the caller waits for it (ForwardBackward's
  // read of the loss does) before the next Gather rewrites the buffers. A
  // LibTorch without CUDA cannot pin: only where the model is on a GPU.
  void PinMemory() {
    pinned_ = true;
    inputs_ = torch::Tensor();
  }
  // The augmentation generator's state as text (checkpoints), and back.
  // InvalidArgument for text that is not such a state.
  std::string SaveRngState() const;
  Status RestoreRngState(const std::string& state);

 private:
  template <typename RowF, typename LabelF>
  Batch Fill(int64_t n, RowF row, LabelF label);

  const Dataset& data_;
  const bool augment_;
  bool pinned_ = false;
  std::mt19937_64 rng_;
  torch::Tensor inputs_;
  torch::Tensor targets_;
  std::vector<float> scratch_;
};

// The device `net`'s parameters are on (the CPU for a model without any).
torch::Device DeviceOf(ClassifierImpl& net);

// Mean loss and accuracy of `model` over all of `data`, in evaluation mode
// and without gradients; the model is put back in training mode after.
struct EvalResult {
  double loss = 0;
  double accuracy = 0;
  int64_t examples = 0;
};
Result<EvalResult> Evaluate(ClassifierImpl& net, const Dataset& data,
                            int64_t batch_size);

// Re-estimates the running statistics of every BatchNorm layer of `net` for
// its current parameters: resets them, then runs forward passes in training
// mode (no gradients) over the first `max_examples` examples of `data` in
// batches of `batch_size`, averaging the batch statistics cumulatively.
// Parameter servers hold parameters only, so a model assembled from pulled
// parameters has no running statistics of its own; the evaluator calls this
// before evaluating. Returns whether the model has BatchNorm layers (false:
// nothing done). Momentum settings are restored; the model is left in
// training mode.
Result<bool> RecalibrateBatchNorm(ClassifierImpl& net, const Dataset& data,
                                  int64_t batch_size, int64_t max_examples);

// Forward and backward on one batch; gradients accumulate into the model's
// flat gradient buffer (zero it first). Returns the batch's mean loss and
// accuracy. On a GPU (the model's parameters are there) the batch is copied
// over first and the gradients stay in the device buffer (FlatParameters::
// FetchGrads brings them back). With `example_losses`, also each example's loss
// (the loss-aware sampler's feedback; the gradient is the same). With a
// ParamGate on the model (cluster.layer_wait), every parameter is waited
// for before the backward pass. LibTorch errors and a failed wait for
// parameters (ParamWaitError) become Status.
struct StepResult {
  double loss = 0;
  double accuracy = 0;
};
Result<StepResult> ForwardBackward(
    ClassifierImpl& net, const Batch& batch,
    std::vector<float>* example_losses = nullptr);

// ForwardBackward's two halves, for a caller that keeps the inputs on the
// device itself (a CUDA graph's static tensors, worker/step_graph.h).
// ForwardBackwardOnDevice queues the forward and the backward pass of
// inputs and targets, already on the model's device, and returns the step's
// results still there, unread: the mean loss, the count of correct
// predictions and, with `example_losses`, each example's loss. ReadStep
// reads them for a batch of `n` (on a GPU in one blocking copy, which also
// waits for everything queued before it). LibTorch errors are thrown.
struct StepTensors {
  torch::Tensor loss;     // [] float32
  torch::Tensor correct;  // [] int64
  torch::Tensor each;     // [n] float32, or undefined
};
StepTensors ForwardBackwardOnDevice(ClassifierImpl& net,
                                    const torch::Tensor& inputs,
                                    const torch::Tensor& targets,
                                    bool example_losses);
StepResult ReadStep(const StepTensors& t, int64_t n,
                    std::vector<float>* example_losses);

// The input shape a dataset presents to a model.
InputSpec InputSpecOf(const Dataset& data);

}  // namespace strata
