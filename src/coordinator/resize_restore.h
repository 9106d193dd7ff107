#pragma once

#include <cstdint>
#include <string>

#include "cluster/run_mode.h"
#include "common/config.h"
#include "common/status.h"
#include "run/checkpoint.h"
#include "run/options.h"
#include "transport/message.h"

namespace strata {

// A cluster checkpoint resumed on another number of workers (`strata train
// --resume DIR --set cluster.workers=M`; docs/design/elastic.md). The
// coordinator hands worker j of the M:
//   - the JSON state of old worker j (j < n), or of old worker j mod n with
//     its counters reset to the step (a newcomer), plus "resize":
//     {"from_workers": n, "to_workers": M, "cursors": [every old worker's
//     data cursor: "sampler", "epoch_offset", "rest"]}: the worker
//     re-plans the rest of the epoch from them (worker/epoch_remainder.h);
//   - the tensors of that old worker: its model and optimizer state (modes
//     whose workers keep a model: identical on every worker in allreduce);
//     in ring the optimizer's slices, joined and cut again for M owners;
//     the error-feedback residuals (cluster.compression) only for j < n.

// The number of workers a cluster checkpoint was written by (from its
// coordinator.json); DataLoss when it does not say.
Result<int> CheckpointWorkers(const Checkpoint& checkpoint);

// FailedPrecondition saying why a run of `mode` cannot resume from
// `from` workers on `to`, or Ok. `data_servers`: cluster.data_servers;
// `shard_plan`: data.shard_plan.
Status CheckResize(RunMode mode, int from, int to, int data_servers,
                   const std::string& shard_plan);

// FailedPrecondition or InvalidArgument saying why the run of `config` /
// `o` cannot scale to `to` workers now (`strata scale`): checkpoints off
// (a scale resumes from one), the same count, a count cluster.min_workers
// / max_workers or the batch cannot take, or CheckResize's reasons.
Status CheckScale(const Config& config, const ClusterRunOptions& o, int to);

// Worker `index`'s restore reply (kRestoreRequest) when the checkpoint was
// written by `from` workers and the run now has `to`. DataLoss for a
// checkpoint whose worker states do not fit.
Result<Message> ResizedWorkerState(const Checkpoint& checkpoint, RunMode mode,
                                   int from, int to, int index);

}  // namespace strata
