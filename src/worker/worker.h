#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cluster/member.h"
#include "common/config.h"
#include "data/dataset.h"
#include "ps/client.h"
#include "sharding/resolve.h"
#include "train/exchange.h"
#include "train/run_dir.h"
#include "train/run_options.h"
#include "train/worker_metrics.h"

namespace strata {

class BatchStream;

// Settings every worker and the evaluator read from the run config.
// Training examples the evaluator runs through the model to re-estimate
// BatchNorm statistics before each evaluation (RecalibrateBatchNorm).
inline constexpr int64_t kBatchNormExamples = 4096;

// What a worker shows the evaluator of its model (decentralized modes,
// kModelRequest): the live parameters while it trains (read under `mu`,
// which the exchange holds while it writes them), a copy once it is done.
// Thread-safe through `mu`.
struct PublishedModel {
  std::mutex mu;
  const float* live = nullptr;    // GUARDED_BY(mu)
  int64_t size = 0;               // GUARDED_BY(mu)
  int64_t step = 0;               // GUARDED_BY(mu)
  std::vector<float> final_copy;  // GUARDED_BY(mu)
  bool frozen = false;            // GUARDED_BY(mu)
  // The worker's counters after its last step (kept only with
  // cluster.metrics_address, for /metrics).
  WorkerMetrics metrics;  // GUARDED_BY(mu)

  void Publish(const float* params, int64_t size, int64_t step);
  // Copies the live parameters and forgets the pointer (before the model
  // goes away).
  void Freeze(int64_t step);
};

// A worker's part in cluster checkpoints (docs/checkpoints.md). The worker
// arrives at the coordinator (kCheckpointArrive, with its state) at a step
// boundary: every `every_updates` steps, after its last step, and at the
// next boundary once the coordinator asked (`pause_round`, set by the
// node's kCheckpointPause handler). Thread-safe through the atomic.
struct WorkerCheckpoints {
  int64_t every_updates = 0;  // 0: only when asked, and at the end
  // The newest round the coordinator asked this worker to arrive for.
  std::atomic<int64_t> pause_round{0};
  // The coordinator's reply to kRestoreRequest: the state the worker
  // resumes from (no payloads: a fresh start).
  Message restore;
};

// A worker's training loop over its shard: per iteration the exchange
// strategy of the mode (exchange.h) brings the parameters up to date, the
// worker draws a mini-batch and computes gradients into the model's flat
// buffer, and the strategy hands them on (push, all-reduce, neighbour
// averaging, gossip, elastic exchange). Returns when its iterations are
// done, `stop` is set or the coordinator ends the run; or on the first
// error. `env` brings the endpoint, membership, key layout, mailbox and
// optimizer; the model's buffers are filled in here. `published` shows
// the model to the evaluator and receives its final copy. Not thread-safe;
// one per thread. Batches come from `shards.worker_indices[index]` through
// the sampler data.sampler names, or, with a `stream`, from the data
// service (then `train` only gives the shape and `shards` is not used).
Result<WorkerMetrics> RunWorker(const Config& config,
                                const ClusterRunOptions& options, int index,
                                const Dataset& train, const ShardSet& shards,
                                ExchangeEnv env, PublishedModel* published,
                                const RunDirectory* run_dir,
                                const std::atomic<bool>* stop,
                                BatchStream* stream = nullptr,
                                WorkerCheckpoints* checkpoints = nullptr);

// Sync k-of-n (options.leader_first): the range whose server chooses each
// step's gradients (shard.h, UpdatePolicy::follower). Pushed whole, range 0;
// pushed range by range (layer-wise pipelining), the last range, which the
// backward pass fills first. -1 without leader-first.
int LeadRange(const ClusterRunOptions& options, const KeyLayout& layout);

// The evaluator: pulls the global model every eval.every_updates updates (or
// eval.every_s seconds), evaluates it on the validation split and appends to
// eval.jsonl the step (updates of the global model per worker), the version
// it evaluated and the metrics, until `done` is set. Not thread-safe.
Status RunEvaluator(const Config& config, const ClusterRunOptions& options,
                    const DatasetSplits& data, PsClient& client,
                    const RunDirectory* run_dir, const std::atomic<bool>* done,
                    std::chrono::steady_clock::time_point start);

// The average of every worker's model (decentralized modes): asks each
// worker (kModelRequest), averages what came back into `dest` (`size`
// floats) and measures how far apart the models are. Workers that do not
// answer within twice the heartbeat timeout (lost ones) are left out;
// kUnavailable when none answered.
struct GatheredModel {
  int64_t min_step = 0;           // the slowest answering worker's step
  double consensus_distance = 0;  // mean of ||w_i - average||_2
  int workers = 0;                // how many answered
};
Result<GatheredModel> GatherWorkerModels(RpcEndpoint& rpc,
                                         const ClusterRunOptions& options,
                                         float* dest, int64_t size);

// The evaluator of a decentralized run: every eval.every_s seconds, the
// average of the workers' models, evaluated on the validation split, with
// the consensus distance, appended to eval.jsonl; until `done` is set or
// the node stops (`member`: the coordinator said so, or was lost).
Status RunPeerEvaluator(const Config& config, const ClusterRunOptions& options,
                        const DatasetSplits& data, RpcEndpoint& rpc,
                        ClusterMember& member, const RunDirectory* run_dir,
                        const std::atomic<bool>* done,
                        std::chrono::steady_clock::time_point start);

}  // namespace strata
