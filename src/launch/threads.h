#pragma once

#include <atomic>

#include "common/config.h"
#include "data/dataset.h"
#include "run/run_dir.h"
#include "run/summary.h"

namespace strata {

// Runs a whole cluster in this process (the embedded default): the
// coordinator, the servers, the workers, the data servers and the
// evaluator as threads (launch/roles.h), talking over the in-process
// transport (cluster.transport = "inproc", zero copy), ZeroMQ TCP or UCX on
// loopback. Writes metrics.jsonl (per worker), eval.jsonl (the evaluator)
// and summary.json (the coordinator: docs/design/run_directory.md). A lost
// worker ends a sync run with an error naming it; async and ssp runs finish
// with the others. `stop` (may be null) ends the run early as in
// TrainLocal. Returns the summary in brief, with the final parameters.
Result<RunSummary> TrainCluster(const Config& config, const DatasetSplits& data,
                                const RunDirectory& run_dir,
                                const std::atomic<bool>* stop);

}  // namespace strata
