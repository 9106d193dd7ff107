#include "sharding/resolve.h"

#include <chrono>

#include "common/log.h"
#include "data/batch_sampler.h"
#include "sharding/plan.h"
#include "sharding/report.h"

namespace strata {

Result<ShardOptions> ShardOptionsFromConfig(const Config& config,
                                            int num_workers) {
  if (num_workers < 1) {
    return Status::InvalidArgument("num_workers must be >= 1, got {}",
                                   num_workers);
  }
  ShardOptions o;
  ASSIGN_OR_RETURN(o.method,
                   ParseShardMethod(config.GetString("data.sharding.method")));
  o.num_workers = num_workers;
  const int64_t seed = config.GetInt("data.sharding.seed");
  o.seed = static_cast<uint64_t>(seed >= 0 ? seed : config.GetInt("run.seed"));
  o.pca_components = config.GetInt("data.sharding.pca_components");
  o.pca_iter = static_cast<int>(config.GetInt("data.sharding.pca_iter"));
  ASSIGN_OR_RETURN(
      o.pca_solver,
      ParsePcaSolver(config.GetString("data.sharding.pca_solver")));
  o.clusters = config.GetInt("data.sharding.clusters");
  o.max_iter = static_cast<int>(config.GetInt("data.sharding.max_iter"));
  o.tol = config.GetFloat("data.sharding.tol");
  o.n_init = static_cast<int>(config.GetInt("data.sharding.n_init"));
  o.subclusters = config.GetInt("data.sharding.subclusters");
  o.threads = static_cast<int>(config.GetInt("data.sharding.threads"));
  return o;
}

Result<ShardSet> ResolveShards(const Config& config, const Dataset& train,
                               int num_workers) {
  ASSIGN_OR_RETURN(ShardOptions options,
                   ShardOptionsFromConfig(config, num_workers));
  ShardSet set;
  const std::string& path = config.GetString("data.shard_plan");
  if (!path.empty()) {
    const auto t = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(set.plan, LoadShardPlan(path));
    RETURN_IF_ERROR(CheckPlanMatches(set.plan, DatasetFingerprint(train),
                                     num_workers, path));
    set.from_file = true;
    LogInfo("shard plan {}: {}, {} workers, loaded and checked in {:.2f} s",
            path, ShardMethodName(set.plan.options.method), num_workers,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t)
                .count());
  } else {
    options.fingerprint = false;  // used at once, never saved
    ASSIGN_OR_RETURN(set.plan, ComputeShardPlan(train, options));
    LogInfo("sharding: {} over {} workers in {:.2f} s",
            ShardMethodName(options.method), num_workers,
            set.plan.timings.total);
  }
  set.worker_indices.resize(static_cast<size_t>(num_workers));
  for (int w = 0; w < num_workers; ++w)
    set.worker_indices[w] = set.plan.WorkerShard(w);
  set.cluster_ids = set.plan.cluster_ids;
  ASSIGN_OR_RETURN(const SamplerKind sampler,
                   ParseSamplerKind(config.GetString("data.sampler")));
  if (set.cluster_ids.empty() && UsesClusters(sampler)) {
    LogInfo("data.sampler = {}: clustering each class into {} sub-clusters",
            SamplerKindName(sampler), options.subclusters);
    ASSIGN_OR_RETURN(set.cluster_ids, ComputeClassSubclusters(train, options));
  }
  set.report = MakeShardReport(set.plan, train.labels);
  return set;
}

}  // namespace strata
