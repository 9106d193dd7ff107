#include "models/flat_parameters.h"

#include <torch/torch.h>

namespace strata {

Result<FlatParameters> FlatParameters::Bind(torch::nn::Module& module) {
  FlatParameters flat;
  auto named = module.named_parameters(/*recurse=*/true);
  int64_t total = 0;
  for (const auto& item : named) {
    const torch::Tensor& p = item.value();
    if (p.scalar_type() != torch::kFloat32 || !p.device().is_cpu()) {
      return Status::InvalidArgument(
          "parameter '{}' is not a float32 CPU tensor", item.key());
    }
    flat.slots_.push_back(Slot{item.key(), total, p.numel(), p.sizes().vec()});
    total += p.numel();
  }
  flat.size_ = total;
  flat.params_ = torch::empty({total}, torch::kFloat32);
  flat.grads_ = torch::zeros({total}, torch::kFloat32);
  torch::NoGradGuard no_grad;
  size_t i = 0;
  for (auto& item : named) {
    torch::Tensor& p = item.value();
    const Slot& slot = flat.slots_[i++];
    torch::Tensor pv =
        flat.params_.narrow(0, slot.offset, slot.numel).view(p.sizes());
    pv.copy_(p);
    p.set_data(pv);
    p.mutable_grad() =
        flat.grads_.narrow(0, slot.offset, slot.numel).view(p.sizes());
  }
  return flat;
}

bool FlatParameters::IsBound(torch::nn::Module& module) const {
  size_t i = 0;
  for (const auto& item : module.named_parameters(true)) {
    if (i >= slots_.size()) return false;
    const Slot& slot = slots_[i++];
    const torch::Tensor& p = item.value();
    if (p.data_ptr<float>() != params_.data_ptr<float>() + slot.offset)
      return false;
    const torch::Tensor& g = p.grad();
    if (!g.defined() ||
        g.data_ptr<float>() != grads_.data_ptr<float>() + slot.offset)
      return false;
  }
  return i == slots_.size();
}

}  // namespace strata
