#pragma once

#include <atomic>
#include <string>

#include "common/status.h"

namespace strata {

// `strata experiment`: what to run and how.
struct ExperimentOptions {
  std::string spec_path;     // the experiment file (TOML)
  std::string output;        // "" = the file's `output`
  int parallel = 0;          // 0 = the file's `parallel`
  double run_timeout_s = 0;  // 0 = the file's `run_timeout_s`
  bool dry_run = false;      // print the plan and the commands only
  bool write_report = true;  // report.html at the end
  std::string exe;           // the strata binary for the child runs
  const std::atomic<bool>* stop = nullptr;  // Ctrl-C
};

// Parses and validates the experiment file, writes <output>/experiment.toml
// (a copy), base.toml (the resolved base config) and plan.json, runs every
// run that is not finished yet (RunPlannedRuns), then writes summary.json,
// summary.csv and report.html and prints the tables.
//
// Returns the exit code: 0 when every planned run is complete, 130 when
// interrupted (run the command again to resume), 1 when some run failed.
// A Status error (bad experiment file, unwritable directory) means nothing
// or not everything could run.
Result<int> RunExperiment(const ExperimentOptions& options);

}  // namespace strata
