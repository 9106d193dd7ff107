#include "python/job.h"

#include <chrono>
#include <exception>

namespace strata {

Job::Job(Body body) {
  thread_ = std::thread([this, body = std::move(body)] { Run(body); });
}

Job::~Job() {
  Stop();
  if (thread_.joinable()) thread_.join();
}

void Job::Run(const Body& body) {
  Result<std::string> out = Status::Internal("the job ended without a result");
  try {
    out = body(&stop_);
  } catch (const std::exception& e) {
    out = Status::Internal("{}", e.what());
  } catch (...) {
    out = Status::Internal("an unknown exception ended the job");
  }
  MutexLock lock(&mu_);
  result_.emplace(std::move(out));
  done_cv_.SignalAll();
}

bool Job::Wait(double timeout_s) {
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(timeout_s));
  MutexLock lock(&mu_);
  while (!result_.has_value()) {
    if (!done_cv_.WaitUntil(deadline)) return result_.has_value();
  }
  return true;
}

Result<std::string> Job::Take() {
  MutexLock lock(&mu_);
  if (!result_.has_value())
    return Status::FailedPrecondition("the job is still running");
  return *result_;
}

}  // namespace strata
