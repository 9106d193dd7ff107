#pragma once

#include <atomic>

#include "common/config.h"
#include "data/dataset.h"
#include "train/local_trainer.h"
#include "train/run_dir.h"

namespace strata {

// Runs a whole parameter-server cluster in this process (cluster.mode sync,
// async or ssp): the coordinator, cluster.servers servers, cluster.workers
// workers and the evaluator as threads, talking over the in-process
// transport (cluster.transport = "inproc", zero copy) or ZeroMQ TCP on
// loopback ("tcp"). Each worker trains on the mod shard of the training set.
// Writes metrics.jsonl (per worker), eval.jsonl (the evaluator) and
// summary.json (final metrics of the global model, per-worker compute and
// communication time and bytes, the staleness histogram, dropped and
// deferred gradients, lost workers). A lost worker ends a sync run with an
// error naming it; async and ssp runs finish with the others.
// `stop` (may be null) ends the run early as in TrainLocal.
Result<RunSummary> TrainCluster(const Config& config, const DatasetSplits& data,
                                const RunDirectory& run_dir,
                                const std::atomic<bool>* stop);

}  // namespace strata
