#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "experiment/runner.h"
#include "experiment/spec.h"

namespace strata {

// The final metrics summarised per cell, in paper 001's column order, then
// time and throughput. Keys of a run's summary.json.
const std::vector<std::string>& SummaryMetrics();

// One cell as the summary and the report see it.
struct CellInfo {
  std::string name;
  std::vector<std::pair<std::string, std::string>> overrides;
  // Every key that any cell overrides, with this cell's effective value, so
  // two cells can be compared key by key.
  std::vector<std::pair<std::string, std::string>> settings;
  std::string compare_to;
};

// One planned run and what its directory holds.
struct LoadedRun {
  std::string name;
  int cell = 0;
  int repeat = 1;
  int64_t seed = 0;
  std::string dir;
  std::string state;       // "complete", "partial", "missing"
  nlohmann::json summary;  // the run's summary.json; null unless complete
};

// An experiment (or a single run seen as a one-cell experiment) read back
// from disk. Value type, thread-compatible.
struct ExperimentData {
  std::string name;
  std::string output;
  std::string baseline;  // cell name or ""
  std::vector<std::string> grid_keys;
  std::vector<CellInfo> cells;
  std::vector<LoadedRun> runs;
  bool single_run = false;
  // The experiment's target_accuracy (0 = none): each complete run's
  // summary then holds time_to_accuracy_s (null: never reached).
  double target_accuracy = 0;
  int parallel = 1;  // runs at once when they ran (plan.json)

  int CellIndex(const std::string& name) const;
};

// The wall_s of the first evaluation in `eval_jsonl` (a run's eval.jsonl)
// whose val_acc is at least `target`; NaN when none is, or the file cannot
// be read.
double TimeToAccuracy(const std::string& eval_jsonl, double target);

// The plan of `spec` as JSON (written to <output>/plan.json by `strata
// experiment`, read by LoadExperiment).
Result<nlohmann::json> PlanJson(const ExperimentSpec& spec);

// Reads <dir>/plan.json and every planned run's summary.json. NotFound when
// there is no plan; DataLoss when it cannot be parsed.
Result<ExperimentData> LoadExperiment(const std::string& dir);
// A run directory as a one-cell, one-run experiment.
Result<ExperimentData> LoadRunDirectory(const std::string& dir);
// An experiment directory (has plan.json) or a run directory (has
// summary.json, metrics.jsonl or config.toml). NotFound otherwise.
Result<ExperimentData> LoadResults(const std::string& path);

// Per cell: n and, for each SummaryMetrics() key, mean, unbiased variance,
// min, max and the variance ratio baseline_var / var; the runs with their
// final metrics and state; the paper 004-style table (change to the
// reference cell, accuracy %, training time s). `outcomes` (optional, from
// RunPlannedRuns) adds exit codes and logs. NaN values become null.
nlohmann::json Summarize(const ExperimentData& data,
                         const std::vector<RunOutcome>* outcomes = nullptr);

// One row per cell: cell, the grid keys, n, then mean/variance/ratio of each
// metric.
std::string SummaryCsv(const nlohmann::json& summary);
// The tables for a terminal: means and variances, variance ratios, and the
// paper 004-style accuracy and time table.
std::string SummaryText(const nlohmann::json& summary);

// Writes summary.json and summary.csv into `dir`. IoError if it cannot.
Status WriteSummaryFiles(const std::string& dir, const nlohmann::json& summary);

}  // namespace strata
