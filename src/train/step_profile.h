// A window of training steps recorded with LibTorch's profiler
// (train.profile_steps, docs/training.md#profiling-a-window-of-steps): every
// operator the step runs, with the step's own phases (strata::* scopes), and
// with a LibTorch that has Kineto (the CUDA builds) the GPU's kernels and
// copies too.
#ifndef STRATA_TRAIN_STEP_PROFILE_H_
#define STRATA_TRAIN_STEP_PROFILE_H_

#include <ATen/record_function.h>

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"

namespace strata {

class RunDirectory;

// Records steps [first, first + count) of the thread that calls it (and the
// threads LibTorch hands that thread's work to: autograd's device threads).
// One profile per process at a time: a second asks in vain and says so.
// count == 0: off, and every call is a no-op.
class StepProfiler {
 public:
  // `who` names the files: profile-<who>.json (and, with Kineto,
  // trace-<who>.json, for chrome://tracing or Perfetto) in `run_dir`.
  StepProfiler(int64_t first, int64_t count, const RunDirectory* run_dir,
               std::string who);
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  // Before step `step` runs (steps counted as the caller does).
  void BeforeStep(int64_t step);
  // After step `step`: the last step of the window writes the files and logs
  // where the steps' time went. A file that cannot be written is a warning:
  // the run goes on.
  void AfterStep(int64_t step);
  // The steps ended before the window did: writes what was recorded (a no-op
  // otherwise). The destructor does it too, for a run that failed.
  void Stop();

 private:
  Status Finish();

  const int64_t first_;
  const int64_t count_;
  const RunDirectory* run_dir_;
  const std::string who_;
  bool on_ = false;
  int64_t steps_ = 0;
};

// Names a phase of a step in a profile ("strata::forward_backward"): a
// LibTorch user scope from construction or Next() to the next Next() or the
// end of the scope. Costs a look-up of LibTorch's callbacks while nothing
// records.
class PhaseMark {
 public:
  explicit PhaseMark(const char* name) { Next(name); }
  // Ends the current phase and starts `name`.
  void Next(const char* name) {
    rf_.reset();
    auto callbacks =
        at::getStepCallbacksUnlessEmpty(at::RecordScope::USER_SCOPE);
    if (!callbacks) return;
    rf_.emplace(std::move(*callbacks));
    if (rf_->isActive()) rf_->before(name);
  }
  // Ends the current phase.
  void End() { rf_.reset(); }

 private:
  std::optional<at::RecordFunction> rf_;
};

}  // namespace strata

#endif  // STRATA_TRAIN_STEP_PROFILE_H_
