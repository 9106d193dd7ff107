#pragma once

// A long call (a training run, an experiment, a sharding) on a thread of its
// own, so that the Python caller can wait for it with the GIL released,
// see Ctrl-C between waits and ask it to stop, as the CLI's signal handler
// does. No Python here: the binding (module.cc) wraps it.

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "common/status.h"

namespace strata {

class Job {
 public:
  // `body` runs on the job's thread; `stop` becomes true when Stop() is
  // called. It returns its result as text (JSON) or an error. An exception
  // it throws comes back as an Internal error with its message.
  using Body = std::function<Result<std::string>(const std::atomic<bool>*)>;

  explicit Job(Body body);
  // Asks the body to stop and waits for it to end.
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  // Waits up to `timeout_s` seconds; true when the body has finished.
  bool Wait(double timeout_s);
  // Asks the body to stop (as Ctrl-C does); it ends at its next check.
  void Stop() { stop_.store(true); }
  bool stop_requested() const { return stop_.load(); }
  // The body's result. FailedPrecondition while it still runs.
  Result<std::string> Take();

 private:
  void Run(const Body& body);

  Mutex mu_;
  CondVar done_cv_{&mu_};
  std::optional<Result<std::string>> result_ GUARDED_BY(mu_);
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace strata
