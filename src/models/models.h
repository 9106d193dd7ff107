#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/status.h"
#include "models/flat_parameters.h"
#include "models/model_options.h"

namespace strata {

// The shape of one input example and the number of classes: a model adapts
// its first layer and its classifier to these.
struct InputSpec {
  int64_t channels = 1;
  int64_t height = 1;
  int64_t width = 1;
  int64_t num_classes = 10;
  int64_t flat_size() const { return channels * height * width; }
};

// Base of every strata model: maps a batch [N, C, H, W] (or [N, D]) to
// logits [N, num_classes]. Not thread-safe: one model per training thread.
class ClassifierImpl : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(torch::Tensor x) = 0;

  // Waiting layer by layer (cluster.layer_wait, docs/design/pipelining.md): a
  // worker may start the forward pass while the parameters are still arriving.
  // A model whose forward() calls Await() before each layer that reads
  // parameters, in the order of its parameters, says so here; the others
  // (scripted models) get every parameter before forward() starts.
  virtual bool awaits_layers() const { return false; }

  // Mixed precision (train.precision, models/precision.h): the type the
  // forward pass computes in under autocast (ForwardBackward, Evaluate);
  // float32 = no autocast. PlaceModel sets it.
  void set_autocast(c10::ScalarType dtype) { autocast_ = dtype; }
  c10::ScalarType autocast() const { return autocast_; }
  // Called with the layer about to run (`part` null), with the part of a
  // parameter about to be read (`layer` null; a row slice, see
  // SliceLayers), or with both null for every parameter (ForwardBackward
  // calls AwaitAll() before the backward pass). It returns once those
  // parameters are in, or throws ParamWaitError. Unset: Await() does
  // nothing.
  using ParamGate = std::function<void(const torch::nn::Module* layer,
                                       const torch::Tensor* part)>;
  void set_param_gate(ParamGate gate) { gate_ = std::move(gate); }
  void AwaitAll() {
    if (gate_) gate_(nullptr, nullptr);
  }

  // Row slices (cluster.slice_kb, docs/design/pipelining.md; P3-style): a model
  // may compute a large fully-connected layer as several products over row
  // slices of its weight. The forward pass then waits for each slice's rows
  // only (first slice first), and the backward pass computes the slices'
  // gradients in the same order, first slice first, each accumulated into
  // the weight's gradient rows (the flat gradient vector) and reported to
  // the GradReport at once. So the slice the next forward pass reads first
  // is the first to leave, and its parameters the first to come back.
  // `cuts` are offsets into the flat parameter vector (a parameter server's
  // range bounds): a weight of more than one range is cut at the last row
  // boundary at or before each cut inside it. The results equal the
  // unsliced layer's to float rounding (smaller matrix products sum in
  // another order). Called once, after FlatParameters::Bind and before
  // training, on a CPU model, with `base` the flat parameter vector's
  // first float (FlatParameters::param_data); models without such layers
  // ignore it. Returns the number of slices made (0: none).
  virtual int SliceLayers(const float* base, const std::vector<int64_t>& cuts) {
    static_cast<void>(base);
    static_cast<void>(cuts);
    return 0;
  }
  // The weights SliceLayers may cut (2-D, a row after a row in the flat
  // vector): a run that will slice them cuts its key ranges inside them at
  // row boundaries only (ClusterPlan::Shape).
  virtual std::vector<torch::Tensor> sliceable_weights() { return {}; }
  // The parameters whose gradients autograd accumulates (every parameter
  // but a sliced weight, whose slices go to the GradReport instead).
  virtual std::vector<torch::Tensor> autograd_parameters() {
    return parameters();
  }
  // Told, on the backward pass's thread, each row slice of a sliced
  // weight's gradient (a view into the flat gradient vector) once it is
  // accumulated there. Unset: nobody is told.
  using GradReport = std::function<void(const torch::Tensor& grad_rows)>;
  void set_grad_report(GradReport report) { report_ = std::move(report); }

 protected:
  // Before `layer` reads its parameters (and every parameter before them).
  void Await(const torch::nn::Module& layer) {
    if (gate_) gate_(&layer, nullptr);
  }
  // Before a row slice `part` (a view into the flat parameters) is read
  // (and every parameter before it).
  void AwaitPart(const torch::Tensor& part) {
    if (gate_) gate_(nullptr, &part);
  }
  void ReportGrad(const torch::Tensor& grad_rows) {
    if (report_) report_(grad_rows);
  }

 private:
  ParamGate gate_;
  GradReport report_;
  c10::ScalarType autocast_ = c10::ScalarType::Float;
};

// What a ParamGate throws when the parameters it waited for never came (a
// server lost, a timeout): the forward pass stops, and ForwardBackward
// returns `status`.
class ParamWaitError : public std::exception {
 public:
  explicit ParamWaitError(Status status) : status_(std::move(status)) {}
  const char* what() const noexcept override {
    return status_.message().c_str();
  }
  const Status& status() const { return status_; }

 private:
  Status status_;
};

// A model plus its flat parameter vector: after CreateModel every parameter
// and every gradient is a view into flat.params() / flat.grads(). Move-only.
struct Model {
  std::string name;
  std::shared_ptr<ClassifierImpl> net;
  FlatParameters flat;
};

// Builds the named model for `input`, initialised deterministically from
// options.seed, with its parameters bound to a flat vector. InvalidArgument
// for an unknown name or an input the architecture cannot take (a conv model
// on flat vectors, images too small for LeNet's two 5x5 convolutions).
// Thread-safe (initialisation seeds LibTorch's generator under a lock).
Result<Model> CreateModel(const ModelOptions& options, const InputSpec& input);

// CreateModel on a short-lived thread of its own (common/own_thread.h), for
// a caller whose thread lives all run: initialising the model runs LibTorch
// operators, which would leave an idle OpenMP team on the caller's thread.
Result<Model> CreateModelOnThreadOfItsOwn(const ModelOptions& options,
                                          const InputSpec& input);

// Moves a model made by CreateModel to `where.device` ("cpu", "cuda",
// "cuda:N", or "cuda:*": cuda:0, see WorkerDevice), sets its forward pass's
// precision (where.precision) and binds its flat vector there (FlatParameters:
// on a GPU the
// *_data() pointers become host mirrors; Upload() before the forward pass,
// FetchGrads() after the backward pass). "cpu" does nothing, unless
// where.emulate_gpu_buffers: then the flat vector is bound as on a GPU, with
// buffers on the CPU. InvalidArgument for a name that is not such a device,
// or a GPU with emulate_gpu_buffers, or a precision that is not one
// (ParsePrecision); FailedPrecondition, naming
// train.device, where this LibTorch has no CUDA or sees no GPU, and naming
// train.cuda_graph, where it is asked for on the CPU or in a build without
// CUDA graphs.
Status PlaceModel(Model& model, const DeviceOptions& where);
// The same checks alone, for a run to fail before it starts its nodes.
Status CheckDevice(const DeviceOptions& where);

// train.device = "cuda:*": every GPU of the machine, the workers spread
// over them in turn; whatever is not a worker (the evaluator, the local
// trainer) computes on cuda:0.
inline constexpr const char* kEveryGpu = "cuda:*";
// The device worker `index` computes on: `where`, except with "cuda:*",
// cuda:(index mod gpus) (`gpus` > 0: the GPUs this process sees).
DeviceOptions WorkerDevice(const DeviceOptions& where, int index, int gpus);
// The GPUs this LibTorch sees (0 without CUDA).
int VisibleGpus();
// Where `workers` workers, threads of one process, compute eagerly on
// `gpus` GPUs (read only for "cuda:*") with two or more on one GPU, and their
// backward passes run on LibTorch's autograd thread (train.gpu_backward =
// autograd_thread, or a LibTorch before 2.0): a note that LibTorch runs every
// such backward pass of a process on its one thread per GPU, so theirs take
// turns, and what avoids it (train.cuda_graph, --processes, own_thread).
// Empty otherwise: the CPU, a graph, one worker a GPU, or each worker's
// backward on its own thread.
std::string SharedGpuNote(const DeviceOptions& where, int workers, int gpus);

// A gate for model.net (ClassifierImpl::set_param_gate) that calls
// `await(end)` before a layer runs (or a part of a parameter is read), with
// `end` the end, in floats of the flat vector, of that layer's parameters
// (or of the part; a prefix: every parameter before them too); -1 for
// every parameter. Layers without parameters are let
// through. Offsets are taken from model.flat.compute_params() (on a GPU the
// layers' tensors are views of the device buffer). `await` throws
// ParamWaitError to stop the forward pass.
ClassifierImpl::ParamGate PrefixGate(const Model& model,
                                     std::function<void(int64_t end)> await);

// The names CreateModel accepts.
const std::vector<std::string>& ModelNames();

}  // namespace strata
