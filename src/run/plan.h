#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "ps/key_range.h"
#include "run/options.h"
#include "sharding/resolve.h"

namespace strata {

// What the cluster plan needs to know of the model: its parameter count,
// where each tensor ends in the flat vector, and the weights a worker may
// compute in row slices (cluster.slice_kb). The worker module reads it off
// a probe model (worker/plan_probe.h); the arithmetic below needs no
// LibTorch.
struct ModelShape {
  int64_t num_params = 0;
  std::vector<int64_t> tensor_ends;  // increasing; the last is num_params
  struct Weight {
    int64_t offset = 0;  // where the weight starts in the flat vector
    int64_t rows = 0;
    int64_t cols = 0;
    int64_t numel() const { return rows * cols; }
  };
  std::vector<Weight> sliceable;
  // Whether the model's forward pass waits layer by layer
  // (ClassifierImpl::awaits_layers): only such a model is sliced.
  bool awaits_layers = false;
};

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
  // them from the run facts (run/run_facts.h).
  std::vector<int64_t> tensor_ends;
  // Which examples each worker trains on (data.shard_plan or
  // data.sharding.*; sharding/resolve.h). Null where the plan was made
  // without them (servers, evaluator and coordinator do not need them).
  std::shared_ptr<const ShardSet> shards;

  // The parameter count, the cut points and the key layout for a model of
  // `shape`: the tensors' ends, and inside a weight the workers slice
  // (options.SlicesWeight), the fewest equal slices of a multiple of 16
  // rows. The errors of KeyLayout::Aligned.
  Status Shape(const ModelShape& shape);
  // options.iterations from the epochs when train.iterations is 0.
  void SetIterations(int64_t train_size);
};

// Sync k-of-n (options.leader_first): the range whose server chooses each
// step's gradients (shard.h, UpdatePolicy::follower). Pushed whole, range 0;
// pushed range by range (layer-wise pipelining), the last range, which the
// backward pass fills first. -1 without leader-first.
int LeadRange(const ClusterRunOptions& options, const KeyLayout& layout);

// LibTorch threads for each worker: cluster.threads_per_worker, or with 0
// this machine's cores shared among the `num_workers` workers (at least 1).
int ThreadsPerWorker(const ClusterRunOptions& options);

}  // namespace strata
