#pragma once

// Which process runs a run directory. `strata train` (and a coordinator
// started by hand with `strata node`) holds RUN_DIR/run.lock for as long as
// the run goes on: an flock(2), which the kernel releases when the process
// ends, however it ends. A second `strata train --resume` of a run that
// is going on is refused, naming the holder; `strata scale` refuses at once
// a run that has ended (docs/design/run_directory.md).

#include <optional>
#include <string>

#include "common/status.h"

namespace strata {

class RunLock {
 public:
  // Takes RUN_DIR/run.lock (made if missing) and writes this process's
  // PID into it. FailedPrecondition naming the holder's PID where another
  // process (or another RunLock of this one) holds it; IoError where the
  // file cannot be made or locked.
  static Result<RunLock> Acquire(const std::string& run_dir);
  // Acquire, except that a file system that cannot lock costs only the
  // check: a warning, and no lock. What `strata train`, a coordinator by
  // hand and strata.train from Python hold.
  static Result<std::optional<RunLock>> Hold(const std::string& run_dir);

  enum class State {
    kNone,  // no run.lock: a run no `strata train` of this version ran
    kFree,  // a run held it and has ended
    kHeld,  // a run is going on
  };
  static State Probe(const std::string& run_dir);

  RunLock(RunLock&& other) noexcept;
  RunLock& operator=(RunLock&& other) noexcept;
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;
  ~RunLock();

 private:
  explicit RunLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace strata
