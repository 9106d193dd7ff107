#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "common/status.h"
#include "experiment/spec.h"

namespace strata {

// What a run directory holds, judged from its files.
enum class RunDirState {
  kMissing,   // no directory
  kComplete,  // summary.json with "interrupted": false and no "error"
  kPartial,   // anything else: interrupted, failed, or still being written
};
RunDirState InspectRunDir(const std::string& dir);

// The outcome of one planned run after an experiment pass.
struct RunOutcome {
  std::string name;
  // "done" (finished now), "skipped" (finished earlier; not re-run),
  // "failed" (non-zero exit or no complete summary), "timeout",
  // "interrupted" (stopped by Ctrl-C), "pending" (never started).
  std::string state = "pending";
  int exit_code = 0;
  double seconds = 0;  // wall time of the child process; 0 when skipped
  std::string log;     // the child's captured stdout and stderr
};

struct RunnerOptions {
  std::string exe;          // the strata binary (usually /proc/self/exe)
  std::string output;       // the experiment directory
  std::string base_config;  // resolved base config (TOML) given to `train -c`
  int parallel = 1;
  double run_timeout_s = 3600;
  // After Ctrl-C or a timeout, how long a run may take to evaluate and write
  // its summary before it is killed.
  double stop_grace_s = 120;
  const std::atomic<bool>* stop = nullptr;
  bool print_progress = true;  // progress lines on stdout
};

// Runs every planned run of `spec` that is not complete yet, each as a child
// process `<exe> train -c <base_config> --set <overrides> --set
// run.dir=<output>/runs --set run.name=<run> --set run.seed=<seed>` in its
// own process group, with stdout and stderr in <run dir>/train.log (in
// <output>/logs/<run>.log when the run never made its directory).
//
// Resume: a run whose directory is complete (InspectRunDir) and whose
// config.toml matches the plan is skipped; a partial or outdated one is moved
// to <output>/stale/<run>-<n> and run again from scratch.
//
// On *stop (Ctrl-C) no new run starts and every child gets one SIGINT (it
// finishes its step, evaluates, writes an interrupted summary and exits 130);
// a child still alive after stop_grace_s is killed. A run over
// run_timeout_s is stopped the same way and reported as "timeout".
//
// Returns one outcome per planned run, in plan order. The Status is an error
// only when the experiment itself cannot proceed (cannot create directories
// or start a process); failed runs are outcomes, not errors.
Result<std::vector<RunOutcome>> RunPlannedRuns(const ExperimentSpec& spec,
                                               const RunnerOptions& options);

// The argument vector of one run's child process (argv[0] = exe).
std::vector<std::string> RunCommand(const ExperimentSpec& spec,
                                    const PlannedRun& run,
                                    const RunnerOptions& options);

// "1h02m", "3m10s", "42s".
std::string FormatDuration(double seconds);

}  // namespace strata
