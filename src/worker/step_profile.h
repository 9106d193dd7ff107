// A window of training steps recorded with LibTorch's profiler
// (train.profile_steps, docs/guide/profiling.md): every
// operator the step runs, with the step's own phases (strata::* scopes), and
// with a LibTorch that has Kineto (pip's PyTorch) the GPU's kernels and
// copies too.
#pragma once

#include <ATen/record_function.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "common/status.h"
#include "common/timeline.h"

namespace strata {

class RunDirectory;

// Records steps [first, first + count) of the thread that drives it (and the
// threads LibTorch hands that thread's work to: autograd's device threads
// with train.gpu_backward = autograd_thread).
// A run resumed inside the window records the rest of it. One profile per
// process at a time: a second one asks in vain and says so. Whatever runs on
// the thread between two steps of the window (an evaluation, a checkpoint) is
// recorded too, outside the strata::step scope. A GPU's rows come from a
// process-wide tracer: with several workers on one GPU in one process they
// hold the others' kernels too. count == 0: off, and every call is a no-op.
//
// Not thread-safe: construct, drive and destroy it on one thread (LibTorch's
// profiler state belongs to the thread that started it).
class StepProfiler {
 public:
  // `who` names the files: profile-<who>.json (and, with Kineto,
  // trace-<who>.json, for chrome://tracing or Perfetto) in `run_dir`.
  // `gpu`: the steps run on a GPU, whose activity is recorded too.
  StepProfiler(int64_t first, int64_t count, const RunDirectory* run_dir,
               std::string who, bool gpu);
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  // Before step `step` runs (steps counted from 0).
  void BeforeStep(int64_t step);
  // After step `step`: the last step of the window writes the files and logs
  // where the steps' time went. A file that cannot be written is a warning:
  // the run goes on.
  void AfterStep(int64_t step);
  // The steps are over: writes what was recorded if the window was still
  // open, or says that it never opened. The destructor does it too, for a
  // run that failed.
  void Stop();

 private:
  Status Finish();

  const int64_t first_;
  const int64_t count_;
  const RunDirectory* run_dir_;
  const std::string who_;
  const bool gpu_;
  bool on_ = false;
  bool done_ = false;  // recorded and written, or said why not
  int64_t steps_ = 0;
  int64_t first_recorded_ = 0;
};

// Names a phase of a step in a profile ("strata::forward_backward"): a
// LibTorch user scope from construction or Next() to the next Next(), End()
// or the end of the scope. Costs a look-up of LibTorch's callbacks while
// nothing records. Not thread-safe: one thread's scope.
//
// With the cluster's timeline on (common/timeline.h) each phase is also a
// span of the thread's node, named without the "strata::" prefix.
class PhaseMark {
 public:
  explicit PhaseMark(const char* name) { Next(name); }
  ~PhaseMark() { EndSpan(); }
  PhaseMark(const PhaseMark&) = delete;
  PhaseMark& operator=(const PhaseMark&) = delete;
  // Ends the current phase and starts `name`.
  void Next(const char* name) {
    End();
    if (timeline::On()) {
      span_name_ = std::strncmp(name, "strata::", 8) == 0 ? name + 8 : name;
      span_start_ = timeline::NowNs();
    }
    auto callbacks =
        at::getStepCallbacksUnlessEmpty(at::RecordScope::USER_SCOPE);
    if (!callbacks) return;
    rf_.emplace(std::move(*callbacks));
    if (rf_->isActive()) rf_->before(name);
  }
  // Ends the current phase.
  void End() {
    rf_.reset();
    EndSpan();
  }

 private:
  void EndSpan() {
    if (span_start_ < 0) return;
    timeline::Add(span_name_, "step", span_start_, timeline::NowNs());
    span_start_ = -1;
  }

  std::optional<at::RecordFunction> rf_;
  const char* span_name_ = "";
  int64_t span_start_ = -1;
};

}  // namespace strata
