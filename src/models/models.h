#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/status.h"
#include "models/flat_parameters.h"

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

struct ModelOptions {
  std::string name = "mlp";  // mlp, lenet, cnn4, resnet20/32/56, torchscript
  int64_t hidden = 256;      // mlp hidden units
  uint64_t seed = 1;         // initialisation seed
  std::string path;          // torchscript: the saved module

  // model.name, model.hidden, model.path and run.seed from a run config.
  static ModelOptions FromConfig(const Config& config);
};

// Base of every strata model: maps a batch [N, C, H, W] (or [N, D]) to
// logits [N, num_classes]. Not thread-safe: one model per training thread.
class ClassifierImpl : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(torch::Tensor x) = 0;
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

// Moves a model made by CreateModel to `device` (train.device: "cpu",
// "cuda" or "cuda:N") and binds its flat vector there (FlatParameters: on
// a GPU the *_data() pointers become host mirrors; Upload() before the
// forward pass, FetchGrads() after the backward pass). "cpu" does nothing.
// InvalidArgument for a name that is not such a device; FailedPrecondition,
// naming train.device, where this LibTorch has no CUDA or sees no GPU.
Status PlaceModel(Model& model, const std::string& device);
// The same checks alone, for a run to fail before it starts its nodes.
Status CheckDevice(const std::string& device);

// The names CreateModel accepts.
const std::vector<std::string>& ModelNames();

}  // namespace strata
