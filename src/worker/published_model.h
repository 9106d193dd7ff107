#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "common/mutex.h"
#include "run/worker_metrics.h"
#include "transport/message.h"

namespace strata {

// What a worker shows the evaluator of its model (decentralized modes,
// kModelRequest): the live parameters while it trains (read under `mu`,
// which the exchange holds while it writes them), a copy once it is done.
// Thread-safe through `mu`.
struct PublishedModel {
  Mutex mu;
  const float* live GUARDED_BY(mu) = nullptr;
  int64_t size GUARDED_BY(mu) = 0;
  int64_t step GUARDED_BY(mu) = 0;
  std::vector<float> final_copy GUARDED_BY(mu);
  bool frozen GUARDED_BY(mu) = false;
  // The worker's counters after its last step (kept only with
  // cluster.metrics_address, for /metrics).
  WorkerMetrics metrics GUARDED_BY(mu);

  void Publish(const float* params, int64_t size, int64_t step);
  // After a step: the steps done, and with `counters` (cluster.
  // metrics_address) the worker's counters, for /metrics, with the data
  // service's `data_wait_s` (< 0: none).
  void AfterStep(int64_t steps, const WorkerMetrics* counters,
                 double data_wait_s);
  // Copies the live parameters and forgets the pointer (before the model
  // goes away).
  void Freeze(int64_t step);
  // The reply to the evaluator's kModelRequest: the model (live or frozen)
  // in payload 0 and its step in clock; no payloads before there is one.
  Message Snapshot();
  // The counters of the last step, as /metrics takes them.
  std::string MetricsJson();
};

}  // namespace strata
