#pragma once

// The data service on another number of workers (docs/design/elastic.md,
// "The data service"). A run fed by the data service keeps its data cursors
// in the data servers, not in the workers, so a resize re-plans there:
//
//   dynamic  one sampler per data server over its examples, whatever the
//            worker count: the cursor is restored as it was, and newcomers
//            simply ask (BatchCursor::RestoreState takes any count). On
//            another number of data servers the examples change hands:
//            ReplanRegrouped.
//   static   every old data server's cursor is rebuilt over the old
//            shards and restored; what it had left to serve before the
//            epoch the new shards start at (its returned and leased
//            batches, its parts, the rest of each sampler's epoch) is
//            pooled per epoch over every data server and split over the
//            new workers with the run's sharding method
//            (sharding/replan.h), exactly as workers that load their own
//            data re-plan (worker/epoch_remainder.h). Each data server
//            then serves its new workers their parts first, and their new
//            shards from the next epoch, for the same number of batches
//            each (lockstep modes need it).
//
// Every data server computes the same split from the same old cursors, so
// every example left is served exactly once, under its own epoch. The old
// data servers may be another number of them (a scale with
// --data-servers): their cursors are rebuilt over their own old workers.
//
// Thread-safety: thread-safe (no shared state).

#include <cstdint>
#include <nlohmann/json.hpp>

#include "common/status.h"
#include "data/batch_cursor.h"
#include "data/dataset.h"
#include "run/options.h"
#include "sharding/resolve.h"

namespace strata {

// What a re-plan found: the examples left over every old worker and the
// largest class TV distance of a new worker's part.
struct ServedReplan {
  int64_t examples = 0;
  double max_tv = 0;
  int64_t next_epoch = 0;  // the new shards start there
};

// Data server `index`'s re-plan onto `cursor` (its new, static cursor over
// the workers w with w mod m == index) from the coordinator's `resize`:
// {"from_workers", "to_workers", "from_data_servers" (absent: as many as
// now), "steps": [the step each new worker resumes at], "old": [every old
// data server's cursor state]}. `old_shards`
// are the run's shards for the old worker count. DataLoss naming what does
// not fit.
Result<ServedReplan> ReplanServed(const ClusterRunOptions& o,
                                  const nlohmann::json& resize, int index,
                                  const Dataset& train,
                                  const ShardSet& old_shards,
                                  BatchCursor& cursor);

// Dynamic assignment on another number of data servers (`strata scale
// --data-servers M`): data server `index` of the M now serves the examples
// i with i mod M == index. Every old data server's cursor (resize["old"])
// is rebuilt over its old examples and restored; what they had left
// before the epoch the new ones start at is pooled per epoch, and this
// data server takes the examples of each epoch's rest that are its own,
// then goes on with its own sampler from that epoch
// (BatchCursor::ContinueRegrouped) onto `cursor`. DataLoss naming what
// does not fit.
Result<ServedReplan> ReplanRegrouped(const ClusterRunOptions& o,
                                     const nlohmann::json& resize, int index,
                                     const Dataset& train,
                                     const std::vector<int32_t>& cluster_ids,
                                     BatchCursor& cursor);

}  // namespace strata
