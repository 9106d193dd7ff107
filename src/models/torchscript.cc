#include "models/torchscript.h"

#include <fstream>

namespace strata {
namespace {

std::string Shape(const torch::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i)
    s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

}  // namespace

Result<std::shared_ptr<TorchScriptImpl>> TorchScriptImpl::Load(
    const std::string& path, const InputSpec& in) {
  if (path.empty()) {
    return Status::InvalidArgument(
        "model.name = \"torchscript\" needs model.path (a module saved with "
        "torch.jit.script(model).save(path))");
  }
  if (!std::ifstream(path).good())
    return Status::NotFound("model.path '{}': no such file", path);
  torch::jit::Module module;
  try {
    module = torch::jit::load(path, torch::kCPU);
  } catch (const c10::Error& e) {
    return Status::DataLoss("model.path '{}' is not a TorchScript module: {}",
                            path, e.what_without_backtrace());
  }
  std::shared_ptr<TorchScriptImpl> net(new TorchScriptImpl(std::move(module)));
  int64_t count = 0;
  for (const auto& p : net->module_.named_parameters(/*recurse=*/true)) {
    std::string name = p.name;
    for (char& c : name)
      if (c == '.') c = '_';
    net->register_parameter(name, p.value, p.value.requires_grad());
    ++count;
  }
  if (count == 0) {
    return Status::InvalidArgument(
        "model.path '{}' holds no parameters: nothing to train", path);
  }
  // A dry run on the dataset's shape: the error names both shapes.
  const std::string expected = "[2, " + std::to_string(in.num_classes) + "]";
  const std::string input = "[2, " + std::to_string(in.channels) + ", " +
                            std::to_string(in.height) + ", " +
                            std::to_string(in.width) + "]";
  try {
    torch::NoGradGuard no_grad;
    net->train(false);
    torch::Tensor out =
        net->forward(torch::zeros({2, in.channels, in.height, in.width}));
    net->train(true);
    if (out.dim() != 2 || out.size(0) != 2 || out.size(1) != in.num_classes) {
      return Status::InvalidArgument(
          "model.path '{}': forward on the dataset's input {} returned shape "
          "{}; a classifier must return logits (N, classes) = {}",
          path, input, Shape(out), expected);
    }
    if (out.scalar_type() != torch::kFloat32) {
      return Status::InvalidArgument(
          "model.path '{}': forward returned {} logits; float32 expected", path,
          c10::toString(out.scalar_type()));
    }
  } catch (const c10::Error& e) {
    return Status::InvalidArgument(
        "model.path '{}': forward failed on the dataset's input {} (logits {} "
        "expected): {}",
        path, input, expected, e.what_without_backtrace());
  }
  return net;
}

torch::Tensor TorchScriptImpl::forward(torch::Tensor x) {
  torch::jit::IValue out;
  try {
    out = module_.forward({std::move(x)});
  } catch (const c10::Error&) {
    throw;
  } catch (const std::exception& e) {
    // The interpreter throws plain runtime errors (a shape mismatch in the
    // user's code); callers turn c10::Error into a Status.
    throw c10::Error({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                     e.what());
  }
  if (!out.isTensor()) {
    throw c10::Error(
        {__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
        "the scripted module's forward did not return a tensor of logits");
  }
  return out.toTensor();
}

void TorchScriptImpl::train(bool on) {
  ClassifierImpl::train(on);
  module_.train(on);
}

int TorchScriptImpl::ResetBatchNormStats() {
  int layers = 0;
  torch::NoGradGuard no_grad;
  for (const auto& m : module_.named_modules()) {
    torch::jit::Module sub = m.value;
    if (!sub.hasattr("running_mean") || !sub.hasattr("running_var")) continue;
    torch::jit::IValue mean = sub.attr("running_mean");
    torch::jit::IValue var = sub.attr("running_var");
    if (!mean.isTensor() || !var.isTensor()) continue;
    mean.toTensor().zero_();
    var.toTensor().fill_(1);
    if (sub.hasattr("num_batches_tracked") &&
        sub.attr("num_batches_tracked").isTensor())
      sub.attr("num_batches_tracked").toTensor().zero_();
    ++layers;
  }
  return layers;
}

}  // namespace strata
