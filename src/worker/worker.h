#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "data/dataset.h"
#include "dataservice/batch_stream.h"
#include "exchange/exchange.h"
#include "run/options.h"
#include "run/run_dir.h"
#include "run/worker_metrics.h"
#include "sharding/resolve.h"
#include "worker/checkpoint_participant.h"
#include "worker/epoch_remainder.h"
#include "worker/published_model.h"

namespace strata {

// What one worker's loop is given. Every pointer outlives the loop.
struct WorkerSetup {
  const ClusterRunOptions* options = nullptr;
  int index = 0;
  // The training split; with a `stream` only its shape is read.
  const Dataset* train = nullptr;
  // Which examples each worker trains on (unused with a `stream`).
  const ShardSet* shards = nullptr;
  // The shards for another worker count: a resume from a checkpoint of
  // another size re-plans the rest of its epoch (may be empty).
  ShardsFor shards_for;
  // The endpoint, membership, key layout, mailbox and optimizer the
  // exchange strategy uses; the model's buffers are filled in by the loop.
  ExchangeEnv env;
  // Shows the model to the evaluator and receives its final copy.
  PublishedModel* published = nullptr;
  const RunDirectory* run_dir = nullptr;  // may be null (no metrics.jsonl)
  // Set: the metrics.jsonl lines go here instead of into run_dir (a worker
  // elsewhere sends them to the coordinator: cluster.forward_metrics).
  std::function<Status(const std::string& line)> forward_metrics;
  const std::atomic<bool>* stop = nullptr;   // may be null
  BatchStream* stream = nullptr;             // the data service, or null
  WorkerCheckpoints* checkpoints = nullptr;  // null: no checkpoints
};

// A worker's training loop: per iteration the exchange strategy of the
// mode (exchange/exchange.h) brings the parameters up to date, the worker
// draws a mini-batch (its batch source) and computes gradients into the
// model's flat buffer, and the strategy hands them on (push, all-reduce,
// neighbour averaging, gossip, elastic exchange). The loop itself only
// calls its parts (worker/*.h): the layer gate, the gradient hooks, the
// batch source, the checkpoint participant, the metrics window, fault
// injection, the stop signal and the profiler window; a new capability is
// a new part. Returns when its iterations are done, the run is stopped or
// the coordinator ends it; or on the first error. Not thread-safe; one per
// thread.
Result<WorkerMetrics> RunWorker(WorkerSetup setup);

}  // namespace strata
