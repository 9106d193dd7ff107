#pragma once

// A user's own PyTorch model (model.name = "torchscript", model.path): a
// module saved from Python with torch.jit.script(model).save(path), loaded
// with LibTorch's torch::jit::load. Its parameters are registered with this
// nn::Module under their scripted names (dots as '_'), so FlatParameters
// binds them to the flat vector exactly as for the built-in models: the
// scripted module computes with views of it. docs/design/models.md.

#include <torch/script.h>

#include <memory>
#include <string>

#include "common/status.h"
#include "models/models.h"

namespace strata {

class TorchScriptImpl : public ClassifierImpl {
 public:
  // Loads `path` and checks it against the data: it must hold parameters
  // (float32), and forward on a batch of 2 examples of `input`'s shape must
  // return logits of shape [2, input.num_classes]. InvalidArgument naming
  // the file, the dataset's shape and what came back otherwise; NotFound /
  // DataLoss for a missing or unreadable file.
  static Result<std::shared_ptr<TorchScriptImpl>> Load(const std::string& path,
                                                       const InputSpec& input);

  torch::Tensor forward(torch::Tensor x) override;
  // Also switches the scripted module (dropout, BatchNorm).
  void train(bool on = true) override;

  torch::jit::Module& script() { return module_; }

  // Resets the running statistics of every scripted BatchNorm layer
  // (running_mean 0, running_var 1, num_batches_tracked 0). Returns how many
  // layers have them. A scripted BatchNorm's momentum is a constant, so
  // re-estimation runs enough forward passes for the old values to fade.
  int ResetBatchNormStats();

 private:
  explicit TorchScriptImpl(torch::jit::Module module)
      : module_(std::move(module)) {}

  torch::jit::Module module_;
};

}  // namespace strata
