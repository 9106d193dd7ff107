#include "coordinator/run_outcome.h"

#include "common/log.h"

namespace strata {

void RunOutcome::Fail(const std::string& what) {
  MutexLock lock(&mu_);
  if (fatal_.empty()) fatal_ = what;
  cv_.SignalAll();
}

void RunOutcome::FailOnWorkerLoss(const std::string& what,
                                  Clock::time_point now) {
  MutexLock lock(&mu_);
  if (!worker_fatal_.empty()) return;
  worker_fatal_ = what;
  worker_fatal_at_ = now;
}

void RunOutcome::PromoteWorkerLoss(Clock::time_point now,
                                   Clock::duration grace) {
  MutexLock lock(&mu_);
  if (worker_fatal_.empty() || !fatal_.empty() ||
      now - worker_fatal_at_ <= grace)
    return;
  fatal_ = worker_fatal_;
  cv_.SignalAll();
}

bool RunOutcome::failed() const {
  MutexLock lock(&mu_);
  return !fatal_.empty();
}

void RunOutcome::MaybeFinish(const WorkerSet& workers, int num_workers) {
  MutexLock lock(&mu_);
  for (NodeId id : workers.live) {
    if (!workers.Done(id)) return;
  }
  if (workers.live.empty() && num_workers > 0) {
    // Every worker was lost before any finished: the run did not finish.
    // The monitor stops it after a grace period in which the loss of
    // another role (usually what stopped the workers, e.g. a server they
    // pushed to) is noticed and named, or a replacement re-joins.
    if (every_worker_lost_ == Clock::time_point{})
      every_worker_lost_ = Clock::now();
    return;
  }
  finished_ = true;
  cv_.SignalAll();
}

void RunOutcome::EveryWorkerLost(const WorkerSet& workers, int num_workers,
                                 Clock::time_point now, Clock::duration grace) {
  MutexLock lock(&mu_);
  if (every_worker_lost_ == Clock::time_point{} || !fatal_.empty() || finished_)
    return;
  if (!workers.live.empty()) {
    every_worker_lost_ = Clock::time_point{};  // a replacement re-joined
    return;
  }
  if (now - every_worker_lost_ <= grace) return;
  fatal_ = fmt::format(
      "lost every worker ({}) before any finished, and no other node was "
      "found lost within {:.1f} s",
      num_workers, std::chrono::duration<double>(grace).count());
  LogError("coordinator: {}; stopping the run", fatal_);
  cv_.SignalAll();
}

Status RunOutcome::WaitForEnd(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  MutexLock lock(&mu_);
  while (!finished_ && fatal_.empty() && !stopping_) {
    if (!cv_.WaitUntil(deadline)) break;
  }
  if (!fatal_.empty()) return Status::Unavailable("{}", fatal_);
  if (finished_) return Status::Ok();
  if (stopping_)
    return Status::Cancelled("coordinator stopped before the workers finished");
  return Status::DeadlineExceeded("");
}

bool RunOutcome::WaitForStop(Clock::duration period) {
  const auto deadline = Clock::now() + period;
  MutexLock lock(&mu_);
  while (!stopping_) {
    if (!cv_.WaitUntil(deadline)) break;
  }
  return stopping_;
}

bool RunOutcome::Stop() {
  MutexLock lock(&mu_);
  if (stopping_) return false;
  stopping_ = true;
  cv_.SignalAll();
  return true;
}

}  // namespace strata
