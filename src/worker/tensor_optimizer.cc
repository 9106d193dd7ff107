#include "worker/tensor_optimizer.h"

#include <cmath>
#include <string>
#include <vector>

namespace strata {
namespace {

// A host optimizer's float constant as LibTorch's double scalar: the kernels
// cast it back to float, so both sides compute with the same float.
double AsFloat(double x) { return static_cast<double>(static_cast<float>(x)); }

Status CheckTensor(const char* what, const torch::Tensor& t, int64_t size,
                   torch::Device device) {
  if (!t.defined())
    return Status::InvalidArgument("optimizer step: no {} tensor", what);
  if (t.scalar_type() != torch::kFloat32 || t.dim() != 1 || t.numel() != size ||
      !t.is_contiguous() || t.device() != device) {
    return Status::InvalidArgument(
        "optimizer step: {} is a {} tensor of {} elements on {}; the optimizer "
        "takes a contiguous float32 vector of {} on {}",
        what, c10::toString(t.scalar_type()), t.numel(), t.device().str(), size,
        device.str());
  }
  return Status::Ok();
}

std::vector<float> ToHost(const torch::Tensor& t) {
  const torch::Tensor h = t.to(torch::kCPU).contiguous();
  const float* p = h.data_ptr<float>();
  return std::vector<float>(p, p + h.numel());
}

}  // namespace

TensorOptimizer::TensorOptimizer(const OptimizerOptions& options, int64_t size,
                                 torch::Device device)
    : o_(options), size_(size), device_(device) {}

Result<std::unique_ptr<TensorOptimizer>> TensorOptimizer::Create(
    const OptimizerOptions& options, int64_t size, torch::Device device) {
  if (size < 0)
    return Status::InvalidArgument("optimizer for {} parameters", size);
  std::unique_ptr<TensorOptimizer> opt(
      new TensorOptimizer(options, size, device));
  try {
    const auto on =
        torch::TensorOptions().dtype(torch::kFloat32).device(device);
    if (options.kind == OptimizerOptions::Kind::kAdam) {
      opt->m_ = torch::zeros({size}, on);
      opt->v_ = torch::zeros({size}, on);
    } else if (options.momentum != 0.0) {
      opt->momentum_ = torch::zeros({size}, on);
    }
  } catch (const c10::Error& e) {
    return Status::Internal("optimizer state on {}: {}", device.str(),
                            e.what_without_backtrace());
  }
  return opt;
}

Status TensorOptimizer::Step(torch::Tensor params, const torch::Tensor& grads,
                             double lr) {
  RETURN_IF_ERROR(CheckTensor("params", params, size_, device_));
  RETURN_IF_ERROR(CheckTensor("grads", grads, size_, device_));
  const double wd = AsFloat(o_.weight_decay);
  try {
    torch::NoGradGuard no_grad;
    // d = g + wd * p, with p before this step (a new tensor: the gradient
    // is the caller's).
    const torch::Tensor d = wd != 0.0 ? grads.add(params, wd) : grads;
    if (o_.kind == OptimizerOptions::Kind::kAdam) {
      const double t = static_cast<double>(steps_ + 1);
      const double b1 = AsFloat(o_.beta1);
      const double b2 = AsFloat(o_.beta2);
      const double bc1 = 1.0 - std::pow(o_.beta1, t);
      const double bc2 = 1.0 - std::pow(o_.beta2, t);
      m_.mul_(b1).add_(d, AsFloat(1.0f - static_cast<float>(b1)));
      v_.mul_(b2).addcmul_(d, d, AsFloat(1.0f - static_cast<float>(b2)));
      // The host's operation order: (sqrt(v) / sqrt(bc2)) + eps.
      const torch::Tensor denom =
          v_.sqrt().div_(AsFloat(std::sqrt(bc2))).add_(AsFloat(o_.eps));
      params.addcdiv_(m_, denom, -AsFloat(lr / bc1));
      ++steps_;
      return Status::Ok();
    }
    const double a = AsFloat(lr);
    if (!momentum_.defined()) {
      params.sub_(d, a);
    } else {
      const double mu = AsFloat(o_.momentum);
      // LibTorch starts the momentum buffer at the first gradient.
      if (steps_ == 0) {
        momentum_.copy_(d);
      } else {
        momentum_.mul_(mu).add_(d);
      }
      if (o_.nesterov) {
        params.sub_(d.add(momentum_, mu), a);
      } else {
        params.sub_(momentum_, a);
      }
    }
    ++steps_;
  } catch (const c10::Error& e) {
    return Status::Internal("optimizer step on {}: {}", device_.str(),
                            e.what_without_backtrace());
  }
  return Status::Ok();
}

Result<OptimizerState> TensorOptimizer::SaveState() const {
  OptimizerState s;
  try {
    if (momentum_.defined()) s.buffers["momentum"] = ToHost(momentum_);
    if (m_.defined()) {
      s.buffers["m"] = ToHost(m_);
      s.buffers["v"] = ToHost(v_);
    }
  } catch (const c10::Error& e) {
    return Status::Internal("copying the optimizer state from {}: {}",
                            device_.str(), e.what_without_backtrace());
  }
  s.steps = steps_;
  return s;
}

Status TensorOptimizer::RestoreState(const OptimizerState& state) {
  // Everything is checked before anything is written.
  std::vector<std::pair<torch::Tensor*, const std::vector<float>*>> take;
  if (momentum_.defined()) {
    ASSIGN_OR_RETURN(const std::vector<float>* b,
                     state.Buffer("momentum", size_));
    take.emplace_back(&momentum_, b);
  }
  if (m_.defined()) {
    ASSIGN_OR_RETURN(const std::vector<float>* m, state.Buffer("m", size_));
    ASSIGN_OR_RETURN(const std::vector<float>* v, state.Buffer("v", size_));
    take.emplace_back(&m_, m);
    take.emplace_back(&v_, v);
  }
  try {
    for (auto& [dest, values] : take) {
      const torch::Tensor host = torch::from_blob(
          const_cast<float*>(values->data()), {size_}, torch::kFloat32);
      dest->copy_(host);
    }
  } catch (const c10::Error& e) {
    return Status::Internal("restoring the optimizer state on {}: {}",
                            device_.str(), e.what_without_backtrace());
  }
  steps_ = state.steps;
  return Status::Ok();
}

}  // namespace strata
