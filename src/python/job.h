#pragma once

// A long call (a training run, an experiment, a sharding) on a thread of its
// own, so that the Python caller can wait for it with the GIL released,
// see Ctrl-C between waits and ask it to stop, as the CLI's signal handler
// does. No Python here: the binding (module.cc) wraps it.

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
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

  // How long the destructor waits for a stopped body to end.
  static constexpr std::chrono::seconds kStopGrace{120};

  explicit Job(Body body);
  // Asks the body to stop and waits up to kStopGrace for it to end; a body
  // still running then is left to finish on its own (detached, with a
  // warning naming the job).
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  // Waits up to `timeout_s` seconds (clamped to [0, 1e6]; NaN is 0); true
  // when the body has finished.
  bool Wait(double timeout_s);
  // Asks the body to stop (as Ctrl-C does); it ends at its next check.
  void Stop() { state_->stop.store(true); }
  bool stop_requested() const { return state_->stop.load(); }
  // The body's result. FailedPrecondition while it still runs.
  Result<std::string> Take();

 private:
  // Shared with the thread, so that a detached body never outlives it.
  struct State {
    Mutex mu;
    CondVar done_cv{&mu};
    std::optional<Result<std::string>> result GUARDED_BY(mu);
    std::atomic<bool> stop{false};
  };
  static void Run(const std::shared_ptr<State>& state, const Body& body);

  std::shared_ptr<State> state_ = std::make_shared<State>();
  std::thread thread_;
};

}  // namespace strata
