#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cluster/member.h"
#include "common/config.h"
#include "data/dataset.h"
#include "ps/client.h"
#include "sharding/resolve.h"
#include "train/run_dir.h"

namespace strata {

// Settings every worker and the evaluator read from the run config.
// Training examples the evaluator runs through the model to re-estimate
// BatchNorm statistics before each evaluation (RecalibrateBatchNorm).
inline constexpr int64_t kBatchNormExamples = 4096;

struct ClusterRunOptions {
  std::string mode;  // sync, async, ssp
  ClusterShape shape;
  int64_t worker_batch = 64;  // per-worker batch (B / n with adaptation)
  int64_t iterations = 0;     // per worker; 0 = epochs * batches per epoch
  int64_t epochs = 1;
  int64_t pull_interval = 1;
  bool overlap = false;    // async: communication of step t overlaps step t+1
  int64_t staleness = -1;  // ssp bound; < 0 for other modes
  bool shuffle = true;
  uint64_t seed = 1;
  int64_t log_every = 50;
  int64_t eval_batch = 1000;
  int64_t eval_every_updates = 0;
  double eval_every_s = 2.0;
  int worker_delay_ms = 0;
  int fail_worker = -1;  // fault injection (tests)
  int64_t fail_at = 0;
  std::chrono::milliseconds request_timeout{120000};

  static Result<ClusterRunOptions> FromConfig(const Config& config);
};

// What one worker measured.
struct WorkerMetrics {
  int index = 0;
  int64_t iterations = 0;
  int64_t samples = 0;
  double compute_s = 0;  // forward, backward, batch assembly
  double comm_s = 0;     // waiting on pushes, pulls and the clock table
  uint64_t bytes_pushed = 0;
  uint64_t bytes_pulled = 0;
  int64_t dropped_gradients = 0;  // pushes a server dropped as late (per range)
  bool finished = false;
  std::string error;

  nlohmann::json ToJson() const;
};

// A worker's training loop over its shard: per iteration (bounded staleness:
// after the clock table allows it) pull every p iterations, draw a
// mini-batch, compute gradients into the model's flat buffer, push them, and
// report the clock. Sync: the push completes when the step closed, and the
// next pull asks for that version. Returns (after telling the servers it
// left) when its iterations are done, `stop` is set or the coordinator ends
// the run; or on the first error. Not thread-safe; one per thread.
// Batches come from `shards.worker_indices[index]` through the sampler
// data.sampler names (shuffle, stratified, cluster-stratified).
Result<WorkerMetrics> RunWorker(const Config& config,
                                const ClusterRunOptions& options, int index,
                                const Dataset& train, const ShardSet& shards,
                                PsClient& client, ClusterMember& member,
                                const RunDirectory* run_dir,
                                const std::atomic<bool>* stop);

// The evaluator: pulls the global model every eval.every_updates updates (or
// eval.every_s seconds), evaluates it on the validation split and appends to
// eval.jsonl the step (updates of the global model per worker), the version
// it evaluated and the metrics, until `done` is set. Not thread-safe.
Status RunEvaluator(const Config& config, const ClusterRunOptions& options,
                    const DatasetSplits& data, PsClient& client,
                    const RunDirectory* run_dir, const std::atomic<bool>* done,
                    std::chrono::steady_clock::time_point start);

}  // namespace strata
