#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/config.h"
#include "data/batch_sampler.h"
#include "data/dataset.h"
#include "models/models.h"
#include "ps/optimizer.h"
#include "run/checkpoint.h"
#include "run/run_dir.h"
#include "run/summary.h"
#include "worker/batch.h"
#include "worker/local_checkpoint.h"

namespace strata {

// Single-process training (cluster.mode = "local"): draws shuffled
// mini-batches, runs forward/backward in LibTorch, applies the flat
// optimizer (the same code the parameter servers run, on the host copy; or,
// with train.local_optimizer, its rules as LibTorch operations on the
// model's device: TensorOptimizer), evaluates on the
// validation split on a schedule and writes metrics.jsonl, eval.jsonl and
// summary.json into `run_dir`. Final train metrics come from a full
// evaluation pass over the training split, final validation metrics from one
// over the validation split.
// `stop` (may be null) is polled between steps: when it becomes true the run
// ends early, evaluates, and writes its summary with interrupted = true.
// Errors: a model that cannot take the data, LibTorch failures (turned into
// Status), I/O errors writing the run directory. Not thread-safe: sets
// LibTorch's intra-op thread count for the process.
Result<RunSummary> TrainLocal(const Config& config, const DatasetSplits& data,
                              const RunDirectory& run_dir,
                              const std::atomic<bool>* stop);

}  // namespace strata
