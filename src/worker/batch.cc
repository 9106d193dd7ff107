#include "worker/batch.h"

#include <torch/torch.h>

#include <cstring>
#include <sstream>

#include "common/timeline.h"
#include "data/transforms.h"
#include "models/precision.h"
#include "models/torchscript.h"

namespace strata {
namespace {

// The forward pass, under autocast with train.precision = bf16; the logits
// come back float32, so the loss and the accuracy are computed in float32.
torch::Tensor Logits(ClassifierImpl& net, const torch::Tensor& inputs,
                     const torch::Device& device) {
  if (net.autocast() == torch::kFloat32) return net.forward(inputs);
  AutocastScope autocast(device.type(), net.autocast());
  return net.forward(inputs).to(torch::kFloat32);
}

}  // namespace

torch::Device DeviceOf(ClassifierImpl& net) {
  for (const auto& p : net.parameters()) return p.device();
  return torch::kCPU;
}

Batcher::Batcher(const Dataset& data, bool augment, uint64_t seed)
    : data_(data),
      augment_(augment && data.height > 1 && data.width > 1),
      rng_(seed),
      scratch_(static_cast<size_t>(data.example_size())) {}

template <typename RowF, typename LabelF>
Batch Batcher::Fill(int64_t n, RowF row, LabelF label) {
  if (!inputs_.defined() || inputs_.size(0) < n) {
    const auto host = torch::TensorOptions().pinned_memory(pinned_);
    inputs_ = torch::empty({n, data_.channels, data_.height, data_.width},
                           host.dtype(torch::kFloat32));
    targets_ = torch::empty({n}, host.dtype(torch::kInt64));
  }
  const int64_t e = data_.example_size();
  float* x = inputs_.data_ptr<float>();
  int64_t* y = targets_.data_ptr<int64_t>();
  for (int64_t k = 0; k < n; ++k) {
    std::memcpy(x + k * e, row(k), sizeof(float) * e);
    y[k] = label(k);
    if (augment_) {
      AugmentExample(x + k * e, data_.channels, data_.height, data_.width, 4,
                     rng_, scratch_.data());
    }
  }
  return Batch{inputs_.narrow(0, 0, n), targets_.narrow(0, 0, n)};
}

Batch Batcher::Gather(const std::vector<int64_t>& indices) {
  return Fill(
      static_cast<int64_t>(indices.size()),
      [&](int64_t k) { return data_.example(indices[k]); },
      [&](int64_t k) { return data_.labels[indices[k]]; });
}

Batch Batcher::FromRows(const float* features, const int64_t* labels,
                        int64_t n) {
  const int64_t e = data_.example_size();
  return Fill(
      n, [&](int64_t k) { return features + k * e; },
      [&](int64_t k) { return labels[k]; });
}

Result<bool> RecalibrateBatchNorm(ClassifierImpl& net, const Dataset& data,
                                  int64_t batch_size, int64_t max_examples) {
  if (auto* script = dynamic_cast<TorchScriptImpl*>(&net)) {
    // A scripted BatchNorm's momentum is a constant: reset the statistics,
    // then run 50 batches (cycling over the first max_examples examples) so
    // that the reset values weigh 0.9^50 < 1 % at the default momentum 0.1.
    try {
      if (script->ResetBatchNormStats() == 0) return false;
      torch::NoGradGuard no_grad;
      net.train();
      const int64_t n = std::min(max_examples, data.size());
      const int64_t b = std::max<int64_t>(2, std::min<int64_t>(n, n / 50 + 32));
      if (n < 2) return true;
      for (int pass = 0, start = 0; pass < 50; ++pass) {
        if (start + b > n) start = 0;
        const int64_t len = std::min(b, n - start);
        auto x = torch::from_blob(const_cast<float*>(data.example(start)),
                                  {len, data.channels, data.height, data.width},
                                  torch::kFloat32);
        net.forward(x.to(DeviceOf(net)));
        start += static_cast<int>(len);
      }
    } catch (const c10::Error& e) {
      return Status::Internal("BatchNorm recalibration failed: {}",
                              e.what_without_backtrace());
    }
    return true;
  }
  std::vector<std::pair<torch::nn::BatchNorm2dImpl*, c10::optional<double>>>
      layers;
  for (const auto& m : net.modules(/*include_self=*/false)) {
    if (auto* bn = m->as<torch::nn::BatchNorm2dImpl>()) {
      layers.emplace_back(bn, bn->options.momentum());
    }
  }
  if (layers.empty()) return false;
  try {
    for (auto& [bn, momentum] : layers) {
      bn->reset_running_stats();
      bn->options.momentum(c10::nullopt);  // cumulative average
    }
    torch::NoGradGuard no_grad;
    net.train();
    const int64_t n = std::min(max_examples, data.size());
    for (int64_t start = 0; start < n; start += batch_size) {
      const int64_t b = std::min(batch_size, n - start);
      if (b < 2) break;  // one example gives no variance
      auto x = torch::from_blob(const_cast<float*>(data.example(start)),
                                {b, data.channels, data.height, data.width},
                                torch::kFloat32);
      net.forward(x.to(DeviceOf(net)));
    }
    for (auto& [bn, momentum] : layers) bn->options.momentum(momentum);
  } catch (const c10::Error& e) {
    for (auto& [bn, momentum] : layers) bn->options.momentum(momentum);
    return Status::Internal("BatchNorm recalibration failed: {}",
                            e.what_without_backtrace());
  }
  return true;
}

Result<EvalResult> Evaluate(ClassifierImpl& net, const Dataset& data,
                            int64_t batch_size) {
  EvalResult r;
  try {
    torch::NoGradGuard no_grad;
    net.eval();
    double loss_sum = 0;
    int64_t correct = 0;
    const torch::Device device = DeviceOf(net);
    // Examples are contiguous: each batch is a view of the dataset's memory.
    for (int64_t start = 0; start < data.size(); start += batch_size) {
      int64_t n = std::min(batch_size, data.size() - start);
      auto x = torch::from_blob(const_cast<float*>(data.example(start)),
                                {n, data.channels, data.height, data.width},
                                torch::kFloat32);
      auto y = torch::from_blob(
          const_cast<int64_t*>(data.labels.data() + start), {n}, torch::kInt64);
      if (!device.is_cpu()) {
        x = x.to(device);
        y = y.to(device);
      }
      auto logits = Logits(net, x, device);
      loss_sum +=
          torch::nn::functional::cross_entropy(
              logits, y,
              torch::nn::functional::CrossEntropyFuncOptions().reduction(
                  torch::kSum))
              .item<double>();
      correct += logits.argmax(1).eq(y).sum().item<int64_t>();
    }
    net.train();
    r.examples = data.size();
    if (r.examples > 0) {
      r.loss = loss_sum / r.examples;
      r.accuracy = static_cast<double>(correct) / r.examples;
    }
  } catch (const c10::Error& e) {
    net.train();
    return Status::Internal("evaluation failed: {}",
                            e.what_without_backtrace());
  }
  return r;
}

StepTensors ForwardBackwardOnDevice(ClassifierImpl& net,
                                    const torch::Tensor& inputs,
                                    const torch::Tensor& targets,
                                    bool example_losses) {
  timeline::Span forward("forward", "step");
  auto logits = Logits(net, inputs, inputs.device());
  // Every parameter is in before the backward pass reads them and its
  // gradients leave (cluster.layer_wait; a no-op without a gate).
  net.AwaitAll();
  StepTensors t;
  torch::Tensor loss;
  if (example_losses) {
    torch::Tensor each = torch::nn::functional::cross_entropy(
        logits, targets,
        torch::nn::functional::CrossEntropyFuncOptions().reduction(
            torch::kNone));
    loss = each.mean();
    t.each = each.detach();
  } else {
    loss = torch::nn::functional::cross_entropy(logits, targets);
  }
  forward.End();
  timeline::Span backward("backward", "step");
  loss.backward();
  backward.End();
  torch::NoGradGuard no_grad;
  t.loss = loss.detach();
  t.correct = logits.argmax(1).eq(targets).sum();
  return t;
}

StepResult ReadStep(const StepTensors& t, int64_t n,
                    std::vector<float>* example_losses) {
  StepResult r;
  if (example_losses != nullptr) {
    auto each = t.each.cpu().contiguous();
    example_losses->assign(each.data_ptr<float>(),
                           each.data_ptr<float>() + each.numel());
  }
  if (t.loss.device().is_cpu()) {
    r.loss = t.loss.item<double>();
    r.accuracy = t.correct.item<double>() / static_cast<double>(n);
  } else {
    // One copy back, so one wait for the device per step instead of two.
    // It also waits for everything queued before it, the uploads of the
    // parameters included: callers rewrite the host copy (pulls, merges,
    // optimizer steps) once this returns, and rely on that. Keep it a
    // blocking copy (docs/design/gpu.md, "Each step").
    torch::Tensor both =
        torch::stack({t.loss, t.correct.to(torch::kFloat)}).cpu();
    r.loss = both[0].item<double>();
    r.accuracy = both[1].item<double>() / static_cast<double>(n);
  }
  return r;
}

Result<StepResult> ForwardBackward(ClassifierImpl& net, const Batch& batch,
                                   std::vector<float>* example_losses) {
  try {
    // On a GPU the batch goes over first (a no-op on the CPU).
    const torch::Device device = DeviceOf(net);
    const torch::Tensor inputs = batch.inputs.to(device, /*non_blocking=*/true);
    const torch::Tensor targets =
        batch.targets.to(device, /*non_blocking=*/true);
    const StepTensors t = ForwardBackwardOnDevice(net, inputs, targets,
                                                  example_losses != nullptr);
    return ReadStep(t, targets.size(0), example_losses);
  } catch (const c10::Error& e) {
    return Status::Internal("training step failed: {}",
                            e.what_without_backtrace());
  } catch (const ParamWaitError& e) {
    return e.status();
  }
}

std::string Batcher::SaveRngState() const {
  std::ostringstream out;
  out << rng_;
  return out.str();
}

Status Batcher::RestoreRngState(const std::string& state) {
  std::istringstream in(state);
  std::mt19937_64 rng;
  in >> rng;
  if (in.fail())
    return Status::InvalidArgument("not a generator state: \"{}\"",
                                   state.substr(0, 40));
  rng_ = rng;
  return Status::Ok();
}

InputSpec InputSpecOf(const Dataset& data) {
  return InputSpec{data.channels, data.height, data.width, data.num_classes};
}

}  // namespace strata
