#pragma once

// The entry point for training: which examples each worker trains on, as
// the run's config says.
//
//   data.shard_plan = "PATH"       use a plan made by `strata shard`
//                                  (fingerprint and worker count checked)
//   data.sharding.method = "..."   compute one at start (default "mod",
//                                  example i to worker i mod n), with
//                                  data.sharding.{seed, pca_components,
//                                  pca_iter, clusters, max_iter, tol, n_init,
//                                  subclusters, threads}
//
// Typical use in the worker set-up (see docs/design/sharding.md):
//   ASSIGN_OR_RETURN(ShardSet shards, ResolveShards(config, data.train, n));
//   WriteShardReport(shards.report, run_dir.File("shard_report.json"));
//   auto sampler = MakeBatchSampler(config.GetString("data.sampler"),
//       shards.worker_indices[w], data.train.labels, shards.cluster_ids,
//       seed, config.GetBool("data.shuffle"));
//
// Thread-safety: thread-safe (no shared state).

#include <nlohmann/json.hpp>
#include <vector>

#include "common/config.h"
#include "common/status.h"
#include "data/dataset.h"
#include "sharding/methods.h"

namespace strata {

struct ShardSet {
  ShardPlan plan;
  // Worker w's examples, broadcast ones included, ascending.
  std::vector<std::vector<int64_t>> worker_indices;
  // Per-example cluster ids for the samplers: the plan's when it has them;
  // computed per class (data.sharding.subclusters) when data.sampler is
  // "cluster-stratified" and the plan has none; otherwise empty.
  std::vector<int32_t> cluster_ids;
  nlohmann::json report;   // MakeShardReport(plan, train.labels)
  bool from_file = false;  // true when data.shard_plan was used
};

// The sharding options a config asks for (data.sharding.*; seed -1 means
// run.seed). InvalidArgument for num_workers < 1 or an unknown method.
Result<ShardOptions> ShardOptionsFromConfig(const Config& config,
                                            int num_workers);

// Resolves the shards of `train` for `num_workers` workers. Errors: the
// plan file's (NotFound, DataLoss), FailedPrecondition when the plan was
// made for another dataset or worker count (both values named), and the
// sharding method's (InvalidArgument).
Result<ShardSet> ResolveShards(const Config& config, const Dataset& train,
                               int num_workers);

}  // namespace strata
