#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "common/config.h"
#include "data/dataset.h"
#include "ps/key_range.h"
#include "sharding/resolve.h"
#include "train/checkpoint.h"
#include "train/nodes.h"
#include "train/run_dir.h"
#include "transport/transport.h"

namespace strata {

struct DataFacts;  // train/data_service.h
struct InputSpec;  // models/models.h

// LibTorch threads for each worker: cluster.threads_per_worker, or with 0
// this machine's cores shared among the `num_workers` workers (at least 1).
int ThreadsPerWorker(const Config& config, int num_workers);

// What every node of a cluster derives, identically, from the run config and
// the training data: the options, the parameter count and key layout, and
// the per-worker iteration budget (equal for all workers, so sync steps
// always find n gradients). The coordinator needs only the options.
struct ClusterPlan {
  ClusterRunOptions options;
  KeyLayout layout;
  int64_t num_params = 0;
  // Where each of the model's tensors ends in the flat vector (increasing),
  // and each row of a weight the workers will slice (cluster.slice_kb):
  // the layout's ranges are cut there (KeyLayout::Aligned). Servers learn
  // them from the run facts (RunFacts).
  std::vector<int64_t> tensor_ends;
  // Which examples each worker trains on (data.shard_plan or
  // data.sharding.*; sharding/resolve.h). Null when Make() was asked not to
  // resolve them (servers, evaluator and coordinator do not need them).
  std::shared_ptr<const ShardSet> shards;

  // With `resolve_shards`, also computes (or loads) the shard plan.
  static Result<ClusterPlan> Make(const Config& config,
                                  const DatasetSplits& data,
                                  bool resolve_shards = true);
  // A worker fed by the data service: the same plan (no shards) from the
  // shape and size the data servers announced.
  static Result<ClusterPlan> FromDataFacts(const Config& config,
                                           const DataFacts& facts);

  // Parameter count and key layout of the configured model for `input`.
  Status SizeFor(const Config& config, const InputSpec& input);
  // options.iterations from the epochs when train.iterations is 0.
  void SetIterations(int64_t train_size);
};

// The run facts a worker (or a data server) announces when it joins, which
// the coordinator hands to the servers: the parameter count, the tensor
// ends, the iterations per worker.
nlohmann::json RunFactsJson(const ClusterPlan& plan);

// A data-service worker's check of its own plan against the run facts the
// data servers announced (RunFactsJson). FailedPrecondition, naming `who`,
// when the parameter count differs, or the tensor ends (another
// cluster.slice_kb: the worker would push ranges no server has).
Status CheckPlanAgainstRunFacts(const std::string& who, const ClusterPlan& plan,
                                const nlohmann::json& facts);

// A node's state from the checkpoint the run resumes from (no payloads: a
// fresh start), asked of the coordinator once the node joined
// (kRestoreRequest; docs/checkpoints.md).
Result<Message> RequestCheckpointState(RpcEndpoint& rpc,
                                       const ClusterRunOptions& o,
                                       const std::string& who);

class Node;  // cluster/node.h

// Waits until the coordinator ends the run; or, when fault injection
// (cluster.fail_node) picks role `role` index `index`, makes the node vanish
// like a crashed process once its time came (kCancelled).
Status ServeUntilTheEnd(Node& node, const ClusterRunOptions& o, Role role,
                        int index);

// The roles of a cluster. Each runs one node until the run ends and is the
// same code whether the node is a thread (TrainCluster) or a process
// (`strata node`). Every wait is bounded: by the heartbeat timeout (the
// coordinator declares silent nodes lost) and cluster.request_timeout_ms.

// The coordinator: waits for every node, watches heartbeats and the clock
// table, stops the run early when `stop` is set, then gathers the servers'
// statistics, the workers' reports and the evaluator's final evaluation,
// writes summary.json into `run_dir` and tells every node to stop. Returns
// the summary, or the run's error (a lost node in sync mode, named) after
// writing the summary anyway.
// cluster.metrics_address can be listened on (or is empty): checked before
// any node starts, so a busy port fails the run at once instead of after
// every node waited for a coordinator that stopped.
Status CheckMetricsAddress(const ClusterRunOptions& options);
// With checkpoint.resume: the run directory's newest checkpoint is one of
// this cluster with this config (the coordinator's own check, made before
// any node starts, so that a changed setting fails the run at once instead
// of after every node waited for a coordinator that stopped).
// Returns the checkpoint it read and checked (null when not resuming), for
// the coordinator of this process to resume from without reading it again.
Result<std::shared_ptr<const Checkpoint>> CheckResumable(
    const Config& config, const ClusterRunOptions& options,
    const RunDirectory& run_dir);

// `resume_from`: the checkpoint CheckResumable returned, or null to read
// the newest one (with checkpoint.resume).
Result<nlohmann::json> RunCoordinatorRole(
    const Config& config, const ClusterRunOptions& options,
    std::unique_ptr<Transport> transport, const RunDirectory& run_dir,
    const std::atomic<bool>* stop,
    std::shared_ptr<const Checkpoint> resume_from = nullptr);

// A server: joins, learns the parameter count and the iteration budget from
// the coordinator (the workers announce them), serves its key range until
// the coordinator says stop. Needs neither the model nor the dataset.
Status RunServerRole(const Config& config, const ClusterRunOptions& options,
                     int index, std::unique_ptr<Transport> transport,
                     const std::string& coordinator_endpoint,
                     const std::atomic<bool>* stop);

// A worker: joins, trains on its shard (RunWorker), reports its metrics.
// A failure is returned after the node went silent (so the coordinator
// notices it like a crash).
Result<WorkerMetrics> RunWorkerRole(const Config& config,
                                    const ClusterPlan& plan, int index,
                                    const DatasetSplits& data,
                                    std::unique_ptr<Transport> transport,
                                    const std::string& coordinator_endpoint,
                                    const RunDirectory* run_dir,
                                    const std::atomic<bool>* stop);

// The evaluator: joins, evaluates the global model on a schedule (eval.jsonl)
// and, when the coordinator asks at the end, the final model on both splits.
// `final_params` (may be null) receives the final flat parameter vector.
Status RunEvaluatorRole(const Config& config, const ClusterPlan& plan,
                        const DatasetSplits& data,
                        std::unique_ptr<Transport> transport,
                        const std::string& coordinator_endpoint,
                        const RunDirectory* run_dir,
                        const std::atomic<bool>* stop,
                        std::vector<float>* final_params = nullptr);

}  // namespace strata
