#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "cluster/member.h"
#include "common/config.h"
#include "data/dataset.h"
#include "ps/client.h"
#include "run/options.h"
#include "run/run_dir.h"
#include "transport/rpc.h"

namespace strata {

// Training examples the evaluator runs through the model to re-estimate
// BatchNorm statistics before each evaluation (RecalibrateBatchNorm).
inline constexpr int64_t kBatchNormExamples = 4096;

// The evaluator: pulls the global model every eval.every_updates updates (or
// eval.every_s seconds), evaluates it on the validation split and appends to
// eval.jsonl the step (updates of the global model per worker), the version
// it evaluated and the metrics, until `done` is set. Not thread-safe.
Status RunEvaluator(const ClusterRunOptions& options, const DatasetSplits& data,
                    PsClient& client, const RunDirectory* run_dir,
                    const std::atomic<bool>* done,
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
Status RunPeerEvaluator(const ClusterRunOptions& options,
                        const DatasetSplits& data, RpcEndpoint& rpc,
                        ClusterMember& member, const RunDirectory* run_dir,
                        const std::atomic<bool>* done,
                        std::chrono::steady_clock::time_point start);

}  // namespace strata
