#pragma once

#include "common/config.h"
#include "data/dataset.h"
#include "models/models.h"
#include "run/plan.h"
#include "run/run_facts.h"

namespace strata {

// The shape of the configured model for `input` (run/plan.h), read off a
// probe model built on a thread of its own. The errors of CreateModel.
Result<ModelShape> ProbeModelShape(const ModelOptions& options,
                                   const InputSpec& input);

// The plan's parameter count and key layout for its model (options.model)
// on `input`.
Status SizePlan(ClusterPlan* plan, const InputSpec& input);

// What every node derives from the run config and the training data: the
// options, the model's shape and key layout, the iteration budget, and
// with `resolve_shards` the shard plan (data.shard_plan or
// data.sharding.*). InvalidArgument for more workers than examples or an
// empty shard.
Result<ClusterPlan> MakeClusterPlan(const Config& config,
                                    const DatasetSplits& data,
                                    bool resolve_shards = true);
// The same from options already resolved from `config`.
Result<ClusterPlan> MakeClusterPlan(ClusterRunOptions options,
                                    const Config& config,
                                    const DatasetSplits& data,
                                    bool resolve_shards);

// A worker fed by the data service: the same plan (no shards) from the
// shape and size the data servers announced.
Result<ClusterPlan> PlanFromDataFacts(const ClusterRunOptions& options,
                                      const DataFacts& facts);

}  // namespace strata
