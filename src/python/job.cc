#include "python/job.h"

#include <cmath>
#include <exception>

#include "common/log.h"

namespace strata {

Job::Job(Body body) {
  thread_ = std::thread(
      [state = state_, body = std::move(body)] { Run(state, body); });
}

Job::~Job() {
  Stop();
  if (!thread_.joinable()) return;
  if (Wait(static_cast<double>(kStopGrace.count()))) {
    thread_.join();
    return;
  }
  LogWarning(
      "strata: a stopped run did not end within {} s; it is left to finish "
      "on its own thread",
      kStopGrace.count());
  thread_.detach();
}

void Job::Run(const std::shared_ptr<State>& state, const Body& body) {
  Result<std::string> out = Status::Internal("the job ended without a result");
  try {
    out = body(&state->stop);
  } catch (const std::exception& e) {
    out = Status::Internal("{}", e.what());
  } catch (...) {
    out = Status::Internal("an unknown exception ended the job");
  }
  MutexLock lock(&state->mu);
  state->result.emplace(std::move(out));
  state->done_cv.SignalAll();
}

bool Job::Wait(double timeout_s) {
  if (!(timeout_s > 0)) timeout_s = 0;  // NaN too
  if (timeout_s > 1e6) timeout_s = 1e6;
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(timeout_s));
  MutexLock lock(&state_->mu);
  while (!state_->result.has_value()) {
    if (!state_->done_cv.WaitUntil(deadline)) return state_->result.has_value();
  }
  return true;
}

Result<std::string> Job::Take() {
  MutexLock lock(&state_->mu);
  if (!state_->result.has_value())
    return Status::FailedPrecondition("the job is still running");
  return *state_->result;
}

}  // namespace strata
