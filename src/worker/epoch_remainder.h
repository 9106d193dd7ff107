#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/status.h"
#include "data/batch_sampler.h"
#include "data/dataset.h"
#include "run/options.h"
#include "sharding/resolve.h"

namespace strata {

// The shards the run's config gives for a number of workers (a resume on
// another worker count asks for the old count's).
using ShardsFor = std::function<Result<ShardSet>(int num_workers)>;

// The rest of an epoch, re-planned over the workers a run resumed on
// (docs/design/elastic.md): the examples the old workers had not reached
// in their current epoch, split with the run's sharding method
// (sharding/replan.h). Every worker computes the same split from the same
// cursors and takes its own part.
struct EpochRemainder {
  std::vector<int64_t> mine;  // this worker's part, ascending
  int64_t epoch = 0;          // the epoch the part finishes
  // The epoch this worker's new shard starts at, after its part.
  int64_t next_epoch = 0;
  int64_t examples = 0;  // left over every worker
  double tv = 0;         // the class TV distance of this worker's part
  double max_tv = 0;     // the largest of any worker's part
};

// The sampler of worker `index`'s part `ids` of epoch `epoch` (the run's
// sampler kind, seeded from the worker and the epoch).
Result<std::unique_ptr<BatchSampler>> MakeRestSampler(
    const ClusterRunOptions& o, int index, std::vector<int64_t> ids,
    int64_t epoch, const Dataset& train,
    const std::vector<int32_t>& cluster_ids);

// A run that counts epochs (train.epochs, not train.iterations): the steps
// a worker resumed at `step` trains in all, its part of the rest of the
// epoch then the epochs left, on the new worker count. The same on every
// worker (lockstep modes need it): the largest part sets it.
int64_t StepsAfterResize(const ClusterRunOptions& o, int64_t step,
                         const EpochRemainder& r, int64_t train_size);

// From the coordinator's "resize" state (coordinator/resize_restore.h):
// every old worker's data cursor ("cursors": its sampler, rebuilt over its
// old shard and restored, or the part of an epoch a previous resize gave
// it) gives what is left of its epoch. DataLoss naming the worker for cursors
// that do not fit; the errors of `shards_for`.
Result<EpochRemainder> ReplanEpoch(const ClusterRunOptions& o,
                                   const nlohmann::json& resize, int index,
                                   const Dataset& train,
                                   const ShardsFor& shards_for);

}  // namespace strata
