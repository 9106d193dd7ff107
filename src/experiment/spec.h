#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/config.h"
#include "common/status.h"

namespace strata {

// One setting of an experiment: a name and the config keys it changes from
// the base config, in order ("cluster.mode" -> "sync"). Values are kept in
// their textual --set form, already validated against the schema.
struct ExperimentCell {
  std::string name;
  std::vector<std::pair<std::string, std::string>> overrides;
  // The cell that paper 004-style tables describe this one against ("" =
  // the experiment's baseline). Variance ratios always use the baseline.
  std::string compare_to;
};

// One planned training run: cell x repeat.
struct PlannedRun {
  std::string name;  // "<cell>_r<repeat>": the run directory's name
  int cell = 0;      // index into ExperimentSpec::cells
  int repeat = 1;    // 1-based
  int64_t seed = 1;
};

// An experiment file (TOML), parsed, validated and expanded:
//
//   name = "sharding-study"
//   output = "runs/sharding_study"      # experiment directory
//   config = "../examples/mnist_mlp.toml"  # optional base file (relative
//                                          # to this file), then [base]
//   repeats = 5
//   seeds = [1, 2, 3, 4, 5]             # optional; default run.seed + r - 1
//   baseline = "random"                 # a cell name or "key=value,..."
//   parallel = 1                        # runs at once
//   run_timeout_s = 3600                # per run
//   target_accuracy = 0.95              # optional: time to this val acc
//   parallel_policy = "strict"          # or "shared" (ParallelHazards)
//   [base]                              # config keys over the base file
//   cluster.mode = "async"
//   [grid]                              # cartesian product of the lists
//   "cluster.mode" = ["sync", "async"]
//   [[cells]]                           # explicit named cells (x grid)
//   name = "random"
//   set = { "data.sharding.method" = "random" }
//   compare_to = "sync"                 # optional: reference cell for the
//                                       # "change to baseline" table
//
// Every key and value (base, grid, cells) is checked against the config
// schema before anything runs. Thread-compatible value type.
struct ExperimentSpec {
  std::string name;
  std::string source;  // the file it came from ("" for a string)
  std::string output;
  Config base;
  int repeats = 1;
  std::vector<int64_t> seeds;  // one per repeat
  std::string baseline;        // cell name; "" = none
  int parallel = 1;
  // parallel_policy: "strict" (the default) refuses to run runs at once
  // when their results or the times they report depend on the machine
  // being theirs alone (ParallelHazards); "shared" runs them anyway, and
  // the summary says their times are not comparable with lone runs.
  bool parallel_shared = false;
  // The validation accuracy whose first reaching the summaries time
  // (time_to_accuracy_s); 0 = none.
  double target_accuracy = 0;
  double run_timeout_s = 3600;
  std::vector<std::string> grid_keys;  // keys varied by the grid, in order
  std::vector<ExperimentCell> cells;
  // Repeat-major: the first repeat of every cell, then the second..., so an
  // interrupted experiment has comparable results for every cell early.
  std::vector<PlannedRun> runs;

  // Parses and validates. InvalidArgument names the file, the entry and
  // what is wrong (an unknown config key, a value the key does not allow,
  // an empty grid list, a baseline that matches no cell or several...).
  static Result<ExperimentSpec> FromFile(const std::string& path);
  // Why the runs of this experiment should not share the machine, one line
  // per cell and reason (empty: they may): a mode whose updates follow the
  // workers' timing (async, ssp, easgd, gossip, tree-easgd, sync with k of
  // n), dynamic
  // data assignment, emulated links or workers (net.*, workers.*: their
  // delays are wall-clock time, while a run that shares the cores computes
  // slower), and target_accuracy (it times the runs).
  std::vector<std::string> ParallelHazards() const;
  static Result<ExperimentSpec> FromString(const std::string& text,
                                           const std::string& origin,
                                           const std::string& base_dir);

  // The config of one run: base, then the cell's overrides. (run.dir,
  // run.name and run.seed are set by the runner.)
  Result<Config> CellConfig(int cell) const;

  // Index of the baseline cell, or -1 when there is none.
  int BaselineIndex() const;
};

// Resolves a baseline given as a cell name or a "key=value[,key=value]"
// selector against `cells`: the one cell whose overrides contain every pair.
// InvalidArgument when none or several match.
Result<int> ResolveBaseline(const std::vector<ExperimentCell>& cells,
                            const std::string& baseline);

// A value's text as `--set` takes it (strings unquoted).
std::string OverrideText(const ConfigValue& value);

}  // namespace strata
