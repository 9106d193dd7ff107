#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <vector>

#include "common/mutex.h"
#include "coordinator/worker_set.h"
#include "transport/rpc.h"

namespace strata {

// The coordinator's barriers among workers (kBarrier, clock = the
// barrier's number): a barrier is released when every live worker that has
// not finished reached it. Barrier 0 (every worker set up) starts the
// training clock. Thread-safe; replies go through `rpc`.
class Barriers {
 public:
  explicit Barriers(RpcEndpoint& rpc) : rpc_(rpc) {}
  // A worker reached barrier msg.header.clock: kept until Release() finds
  // every live worker there; released at once when it was released before
  // (a replacement passing a barrier the others passed long ago).
  void Arrive(Message msg) EXCLUDES(mu_);
  // Releases every barrier `workers` all reached.
  void Release(const WorkerSet& workers) EXCLUDES(mu_);
  // When barrier 0 was released (the epoch of the clock before).
  std::chrono::steady_clock::time_point TrainingStart() const EXCLUDES(mu_);

 private:
  void ReleaseLocked(const WorkerSet& workers) REQUIRES(mu_);

  RpcEndpoint& rpc_;
  mutable Mutex mu_;
  std::map<int64_t, std::vector<Message>> waiting_ GUARDED_BY(mu_);
  int64_t released_ GUARDED_BY(mu_) = -1;  // the highest released
  std::chrono::steady_clock::time_point training_start_ GUARDED_BY(mu_){};
};

// The clock table of bounded staleness (kClock, clock = iterations the
// worker completed): a worker may start its next iteration while its clock
// minus the slowest live worker's is at most `staleness` (< 0: at once).
// A finished worker never holds anyone back. Thread-safe.
class ClockTable {
 public:
  ClockTable(RpcEndpoint& rpc, int64_t staleness)
      : rpc_(rpc), staleness_(staleness) {}
  // A worker's clock request: kept until Grant() finds the others close
  // enough.
  void Request(Message msg) EXCLUDES(mu_);
  // Raises `id`'s clock to `clock` (a worker waiting in a checkpoint round
  // must not hold the others back).
  void Advance(NodeId id, int64_t clock) EXCLUDES(mu_);
  // `id` finished: it holds nobody back any more.
  void Finished(NodeId id) EXCLUDES(mu_);
  // Grants every waiting request the live workers' clocks allow. Called
  // after every change of the clocks or of membership, with a snapshot
  // taken after that change.
  void Grant(const WorkerSet& workers) EXCLUDES(mu_);

 private:
  // The minimum clock over the live workers.
  int64_t MinClockLocked(const WorkerSet& workers) const REQUIRES(mu_);
  void GrantLocked(const WorkerSet& workers) REQUIRES(mu_);

  RpcEndpoint& rpc_;
  const int64_t staleness_;
  mutable Mutex mu_;
  std::map<NodeId, int64_t> clocks_ GUARDED_BY(mu_);
  std::vector<Message> waiting_ GUARDED_BY(mu_);
};

}  // namespace strata
