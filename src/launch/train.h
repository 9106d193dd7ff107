#pragma once

// `strata train` as a function: what the CLI and the Python package
// (src/python) both call, so a run started from either is the same run.

#include <atomic>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/status.h"
#include "run/run_dir.h"
#include "run/summary.h"

namespace strata {

// What to train: the config file, the overrides and the launch.
struct TrainRequest {
  std::string config_path;             // "" = the defaults
  Config base;                         // used when config_path is empty
  std::vector<std::string> overrides;  // "section.key=value", in order
  bool processes = false;              // one process per node
  std::string resume;                  // a run directory to continue
  std::string exe;  // the strata binary (--processes starts its children)
};

// Defaults (or `base`), then the TOML file (or the resumed run's
// config.toml), then the overrides, in that order. InvalidArgument naming
// the override at fault.
Result<Config> ResolveTrainConfig(const TrainRequest& request);

// The run directory: a new one, or the resumed run's (metrics are
// appended, the summary rewritten at the end).
Result<RunDirectory> TrainRunDirectory(const TrainRequest& request,
                                       const Config& config);

// A resumed run is launched as it was first: a run started with --processes
// (its run directory has the nodes' pids.json) resumes with --processes
// when the flag is not given, and the log says so. A request that is not a
// resume, or that says --processes, is returned as it is.
TrainRequest AsLaunchedBefore(TrainRequest request);

// Checks that the launch fits the mode (--processes needs a cluster mode).
// InvalidArgument saying what to change.
Status CheckLaunch(const TrainRequest& request, const Config& config);

// Trains `config` into `run_dir`: the local trainer, a cluster of threads,
// or (request.processes) a cluster of processes. `stop` (may be null) ends
// the run early as Ctrl-C does; the summary then says interrupted. A
// `strata scale` the coordinator accepted stops the run at a checkpoint,
// and it goes on from there on the new worker count (run/scale_request.h).
// Returns the run in brief, with the final parameters when trained in this
// process.
Result<RunSummary> Train(const TrainRequest& request, const Config& config,
                         const RunDirectory& run_dir,
                         const std::atomic<bool>* stop);

}  // namespace strata
