#include "worker/gradient_hooks.h"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <string>

namespace strata {

Result<std::unique_ptr<GradientHooks>> GradientHooks::Install(
    Model& model, GradientSink* sink) {
  std::unique_ptr<GradientHooks> hooks(new GradientHooks(model));
  std::map<std::string, const FlatParameters::Slot*> slots;
  for (const auto& slot : model.flat.slots()) slots[slot.name] = &slot;
  // A sliced weight (cluster.slice_kb) reports its row slices itself, as
  // the backward pass accumulates them; autograd the other parameters.
  const std::vector<torch::Tensor> by_autograd =
      model.net->autograd_parameters();
  if (by_autograd.size() < model.flat.slots().size()) {
    const float* grads = model.flat.grad_data();
    model.net->set_grad_report([sink, grads](const torch::Tensor& rows) {
      const float* at = rows.data_ptr<float>();
      sink->Ready(at - grads, sink->in_place() ? nullptr : at, rows.numel());
    });
  }
  for (const auto& named : model.net->named_parameters()) {
    if (std::none_of(
            by_autograd.begin(), by_autograd.end(),
            [&](const torch::Tensor& t) { return t.is_same(named.value()); })) {
      continue;
    }
    auto it = slots.find(named.key());
    if (it == slots.end()) {
      return Status::Internal("parameter {} has no slot in the flat vector",
                              named.key());
    }
    RETURN_IF_ERROR(hooks->Hook(named.value(), named.key(), it->second->offset,
                                it->second->numel, sink));
  }
  return hooks;
}

Status GradientHooks::Hook(torch::Tensor p, const std::string& name,
                           int64_t offset, int64_t numel, GradientSink* sink) {
  if (!sink->in_place()) {
    const unsigned id =
        p.register_hook([sink, offset, numel](const torch::Tensor& g) {
          torch::Tensor c = g.contiguous().cpu();
          sink->Ready(offset, c.data_ptr<float>(), numel);
        });
    hooks_.emplace_back(p, id);
    return Status::Ok();
  }
  // The accumulator is kept alive here: autograd holds it weakly and would
  // otherwise make a new one (without the hook) each step.
  std::shared_ptr<torch::autograd::Node> acc =
      torch::autograd::impl::grad_accumulator(p);
  if (acc == nullptr) {
    return Status::Internal("parameter {} has no gradient accumulator", name);
  }
  FlatParameters* flat = model_.flat.on_device() ? &model_.flat : nullptr;
  const uintptr_t key = acc->add_post_hook(
      std::make_unique<torch::autograd::utils::LambdaPostHook>(
          [sink, offset, numel, flat](
              const torch::autograd::variable_list& outputs,
              const torch::autograd::variable_list&) {
            // GPU: the gradient is in the device buffer; mark it final.
            // The sink's thread copies its range to the host mirror and
            // waits for it (ExchangeEnv::grads_ready -> WaitGrads): this
            // thread (the one running the backward pass: the worker's own,
            // or autograd's one per GPU with train.gpu_backward =
            // autograd_thread) only records an event.
            if (flat != nullptr) flat->MarkGradsReady(offset, numel);
            sink->Ready(offset, nullptr, numel);
            return outputs;
          }));
  post_hooks_.emplace_back(std::move(acc), key);
  return Status::Ok();
}

GradientHooks::~GradientHooks() {
  for (auto& [p, id] : hooks_) p.remove_hook(id);
  for (auto& [acc, key] : post_hooks_) acc->del_post_hook(key);
  model_.net->set_grad_report(nullptr);
}

}  // namespace strata
