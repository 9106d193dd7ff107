#pragma once

#include <chrono>
#include <string>

#include "common/mutex.h"
#include "common/status.h"
#include "coordinator/worker_set.h"

namespace strata {

// How the run stands from the coordinator's side: going on, finished (every
// live worker reported done), failed (a fatal loss, named), or stopping (the
// coordinator itself stops). Waiters (WaitForEnd, the monitor's period)
// wake on any change. Thread-safe.
class RunOutcome {
 public:
  using Clock = std::chrono::steady_clock;

  // The run failed: `what` names the cause (the first one stays).
  void Fail(const std::string& what) EXCLUDES(mu_);
  // A lost worker will fail the run unless another node's loss, noticed
  // within the grace of PromoteWorkerLoss, names the cause first.
  void FailOnWorkerLoss(const std::string& what, Clock::time_point now)
      EXCLUDES(mu_);
  // Fails the run with the held-back worker loss once `grace` passed.
  void PromoteWorkerLoss(Clock::time_point now, Clock::duration grace)
      EXCLUDES(mu_);
  bool failed() const EXCLUDES(mu_);

  // Finished once every live worker is done. With none left (every worker
  // lost before any finished) the run did not finish: the time of that is
  // noted for EveryWorkerLost.
  void MaybeFinish(const WorkerSet& workers, int num_workers) EXCLUDES(mu_);
  // Fails the run when every worker has been lost for longer than `grace`
  // without a replacement or another loss that names the cause.
  void EveryWorkerLost(const WorkerSet& workers, int num_workers,
                       Clock::time_point now, Clock::duration grace)
      EXCLUDES(mu_);

  // Waits up to `timeout` for the end: OK when finished, Unavailable naming
  // the cause when failed, Cancelled when stopping, DeadlineExceeded (no
  // message; the caller names who is still running) otherwise.
  Status WaitForEnd(std::chrono::milliseconds timeout) EXCLUDES(mu_);
  // Sleeps up to `period`; true once the coordinator is stopping.
  bool WaitForStop(Clock::duration period) EXCLUDES(mu_);
  // Marks the coordinator stopping; false when it already was.
  bool Stop() EXCLUDES(mu_);

 private:
  mutable Mutex mu_;
  CondVar cv_{&mu_};
  std::string fatal_ GUARDED_BY(mu_);
  // A fatal worker loss, held back a moment in case it was caused by a
  // server (or data server) lost at the same time, which is then named.
  std::string worker_fatal_ GUARDED_BY(mu_);
  Clock::time_point worker_fatal_at_ GUARDED_BY(mu_);
  bool finished_ GUARDED_BY(mu_) = false;
  // When the last live worker was lost without any having finished (the
  // epoch of Clock when none is).
  Clock::time_point every_worker_lost_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
};

}  // namespace strata
