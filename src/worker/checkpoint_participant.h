#pragma once

#include <atomic>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "common/status.h"
#include "exchange/exchange.h"
#include "run/options.h"
#include "run/worker_metrics.h"
#include "transport/rpc.h"
#include "worker/batch_source.h"
#include "worker/fault_injection.h"
#include "worker/published_model.h"
#include "worker/stop_signal.h"

namespace strata {

// A worker's part in cluster checkpoints (docs/design/checkpoints.md). The
// worker arrives at the coordinator (kCheckpointArrive, with its state) at
// a step boundary: every `every_updates` steps, after its last step, and at
// the next boundary once the coordinator asked (`pause_round`, set by the
// node's kCheckpointPause handler). Thread-safe through the atomic.
struct WorkerCheckpoints {
  int64_t every_updates = 0;  // 0: only when asked, and at the end
  // The newest round the coordinator asked this worker to arrive for.
  std::atomic<int64_t> pause_round{0};
  // The coordinator's reply to kRestoreRequest: the state the worker
  // resumes from (no payloads: a fresh start).
  Message restore;
};

// What a worker's checkpoint state is made of; each part saves its own.
struct CheckpointedParts {
  Exchange& exchange;
  BatchSource& source;
  FaultInjection& faults;
  WorkerMetrics& metrics;
  PublishedModel& published;
  const ModelBuffers& model;
  // Modes whose workers keep their own model save it too (the parameter-
  // server modes' model is the servers').
  bool keeps_model = false;
};

// The worker loop's checkpoint part: puts a resumed worker's state back,
// and arrives at the coordinator's rounds with it. A state travels as
// kCheckpointArrive's payloads: 0 = JSON (the step, the counters, the
// sampler's cursor, the generators), 1 = safetensors with the model's
// "params" (modes whose workers keep their own model), "optimizer/<buffer>"
// (the local optimizer) and "exchange/<buffer>" (the strategy's own).
// With `checkpoints` null (a run without checkpoints) every call does
// nothing. Not thread-safe: the worker's thread; `rpc`, `stop` and
// `checkpoints` outlive it.
class CheckpointParticipant {
 public:
  CheckpointParticipant(WorkerCheckpoints* checkpoints,
                        const ClusterRunOptions& options, int index,
                        RpcEndpoint& rpc, StopSignal& stop)
      : checkpoints_(checkpoints),
        o_(options),
        index_(index),
        rpc_(rpc),
        stop_(stop) {}

  // Before Exchange::Start: the worker's own model and the strategy's state
  // from the state it resumes from. DataLoss naming the worker for a state
  // that does not fit.
  Status RestoreModel(Exchange& exchange, const ModelBuffers& model,
                      bool keeps_model);
  // Once every part exists: their cursors and counters; returns the step
  // the worker resumes at (0: a fresh start).
  Result<int64_t> RestoreParts(const CheckpointedParts& parts);
  // After step `done` of `total`: arrives when the schedule, the
  // coordinator or a catch-up to the round's step says so.
  Status AfterStep(int64_t done, int64_t total, const CheckpointedParts& parts);
  // After the last step: the end of the run is checkpointed too (the worker
  // first departs: nobody waits for its gradients from here on), unless the
  // worker stopped after a round or trained no step.
  Status AtEnd(bool trained_to_the_end, int64_t first_step,
               const CheckpointedParts& parts);

 private:
  // Arrives with the state at step `done` and waits for the round to end.
  Status Arrive(int64_t done, bool final, bool paused,
                const CheckpointedParts& parts);

  WorkerCheckpoints* const checkpoints_;
  const ClusterRunOptions& o_;
  const int index_;
  RpcEndpoint& rpc_;
  StopSignal& stop_;
  nlohmann::json resumed_;
  // The last round done, and the step to catch up to (-1: none).
  int64_t rounds_done_ = 0;
  int64_t catch_up_to_ = -1;
};

}  // namespace strata
