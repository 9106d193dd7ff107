#include "worker/plan_probe.h"

#include <torch/torch.h>

#include "worker/batch.h"

namespace strata {

Result<ModelShape> ProbeModelShape(const ModelOptions& options,
                                   const InputSpec& input) {
  // The probe's LibTorch operators may start an OpenMP team on the thread
  // that builds it: built on a thread of its own (common/own_thread.h), not
  // on the caller's (the main thread, in process), where the team would
  // stay all run long, idle, beside every worker's (docs/design/gpu.md).
  ASSIGN_OR_RETURN(Model probe, CreateModelOnThreadOfItsOwn(options, input));
  ModelShape shape;
  shape.num_params = probe.flat.size();
  for (const auto& slot : probe.flat.slots())
    shape.tensor_ends.push_back(slot.offset + slot.numel);
  shape.awaits_layers = probe.net->awaits_layers();
  for (const torch::Tensor& w : probe.net->sliceable_weights()) {
    shape.sliceable.push_back(
        {w.data_ptr<float>() - probe.flat.param_data(), w.size(0), w.size(1)});
  }
  return shape;
}

Status SizePlan(ClusterPlan* plan, const InputSpec& input) {
  ASSIGN_OR_RETURN(ModelShape shape,
                   ProbeModelShape(plan->options.model, input));
  return plan->Shape(shape);
}

Result<ClusterPlan> MakeClusterPlan(const Config& config,
                                    const DatasetSplits& data,
                                    bool resolve_shards) {
  ASSIGN_OR_RETURN(ClusterRunOptions options,
                   ClusterRunOptions::FromConfig(config));
  return MakeClusterPlan(std::move(options), config, data, resolve_shards);
}

Result<ClusterPlan> MakeClusterPlan(ClusterRunOptions options,
                                    const Config& config,
                                    const DatasetSplits& data,
                                    bool resolve_shards) {
  ClusterPlan plan;
  plan.options = std::move(options);
  const int n = plan.options.roles.num_workers();
  if (data.train.size() < n) {
    return Status::InvalidArgument(
        "{} training examples cannot feed {} workers", data.train.size(), n);
  }
  RETURN_IF_ERROR(SizePlan(&plan, InputSpecOf(data.train)));
  if (resolve_shards) {
    ASSIGN_OR_RETURN(ShardSet shards, ResolveShards(config, data.train, n));
    for (int w = 0; w < n; ++w) {
      if (shards.worker_indices[w].empty()) {
        return Status::InvalidArgument(
            "worker {} of {} has no examples with sharding method '{}'", w, n,
            ShardMethodName(shards.plan.options.method));
      }
    }
    plan.shards = std::make_shared<const ShardSet>(std::move(shards));
  }
  plan.SetIterations(data.train.size());
  return plan;
}

Result<ClusterPlan> PlanFromDataFacts(const ClusterRunOptions& options,
                                      const DataFacts& facts) {
  ClusterPlan plan;
  plan.options = options;
  RETURN_IF_ERROR(SizePlan(&plan, InputSpec{facts.channels, facts.height,
                                            facts.width, facts.classes}));
  plan.SetIterations(facts.train_size);
  return plan;
}

}  // namespace strata
