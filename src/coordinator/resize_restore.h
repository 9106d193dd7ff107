#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cluster/run_mode.h"
#include "common/config.h"
#include "common/status.h"
#include "run/checkpoint.h"
#include "run/options.h"
#include "transport/message.h"

namespace strata {

// A cluster checkpoint resumed on another number of workers (`strata train
// --resume DIR --set cluster.workers=M`; docs/design/elastic.md). The old
// workers that go on are `kept` (checkpoint.resume_workers: by default the
// first min(n, M); a drain leaves one out), in their new order. The
// coordinator hands worker j of the M:
//   - the JSON state of old worker kept[j] (j < kept.size()), or, for a
//     newcomer, of a kept worker at the smallest step (the slowest clock in
//     the free modes; kept[j mod kept.size()] in lockstep) with its counters
//     reset to that step, plus "resize":
//     {"from_workers": n, "to_workers": M, "cursors": [every old worker's
//     data cursor: "sampler", "epoch_offset", "rest"]}: the worker
//     re-plans the rest of the epoch from them (worker/epoch_remainder.h);
//   - the tensors of that old worker: its model and optimizer state (modes
//     whose workers keep a model: identical on every worker in allreduce);
//     in ring the optimizer's slices, joined and cut again for M owners;
//     the error-feedback residuals (cluster.compression) only for a kept
//     worker.

// The number of workers a cluster checkpoint was written by (from its
// coordinator.json); DataLoss when it does not say.
Result<int> CheckpointWorkers(const Checkpoint& checkpoint);
// The number of data servers whose cursors it holds (data-<k>.json).
int CheckpointDataServers(const Checkpoint& checkpoint);

// FailedPrecondition saying why a run of `mode` cannot resume from
// `from` workers on `to`, or Ok. `data_servers`: cluster.data_servers
// (now: it may change at a resize, never above `to`); `shard_plan`:
// data.shard_plan.
Status CheckResize(RunMode mode, int from, int to, int data_servers,
                   const std::string& shard_plan);
// FailedPrecondition or InvalidArgument saying why the run of `o` cannot
// go on with `to` data servers after `from` (a checkpoint's, or the run's
// before a scale): the data service neither starts nor stops, and under
// dynamic assignment a run counted in steps keeps its number. Ok when the
// count stays.
Status CheckDataServersChange(const ClusterRunOptions& o, int from, int to);

// FailedPrecondition or InvalidArgument saying why the run of `config` /
// `o` cannot scale to `to` workers now (`strata scale`): checkpoints off
// (a scale resumes from one), the same count, a count cluster.min_workers
// / max_workers or the batch cannot take, CheckResize's reasons, or
// `leaving` (a drain) naming a worker the run does not have, one twice, or
// not as many as the count drops by. `data_servers` (> 0): a new number
// of data servers (`strata scale --data-servers`): only for a run fed by
// the data service, and under dynamic assignment one counted in epochs.
Status CheckScale(const Config& config, const ClusterRunOptions& o, int to,
                  const std::vector<int>& leaving = {}, int data_servers = 0);

// checkpoint.resume_workers for a scale of `from` workers that `leaving`
// leave: the others, in order ("0,2,3"); empty when none is named.
std::string KeptWorkers(int from, const std::vector<int>& leaving);

// The old workers that go on as workers 0, 1, ... when `from` workers'
// checkpoint resumes on `to`: `text` is checkpoint.resume_workers ("0,2,3";
// empty: the first min(from, to)). InvalidArgument naming the key for an
// index out of range, twice, or a list of the wrong length (min(from, to):
// a drain names the ones that stay; a growth keeps every old worker).
Result<std::vector<int>> ResumeWorkers(const std::string& text, int from,
                                       int to);

// Worker `index`'s restore reply (kRestoreRequest) when the checkpoint was
// written by `from` workers and the run now has `to`, `kept` going on
// (ResumeWorkers). DataLoss for a checkpoint whose worker states do not fit.
Result<Message> ResizedWorkerState(const Checkpoint& checkpoint, RunMode mode,
                                   int from, int to, int index,
                                   const std::vector<int>& kept);

// Data server `index`'s restore reply when `from` workers' checkpoint
// resumes on `to` (`kept` going on; `data_servers`: the checkpoint's, whose
// cursors it holds, which may differ from the run's now): its own
// data-<index>.json plus "resize": {"from_workers", "to_workers",
// "at_step", "from_data_servers", "steps": [the step each new worker resumes
// at], "old": [every data server's saved cursor]}
// (dataservice/served_replan.h). DataLoss for a checkpoint whose states do not
// fit.
Result<Message> ResizedDataState(const Checkpoint& checkpoint, int from, int to,
                                 int index, int data_servers,
                                 const std::vector<int>& kept);

}  // namespace strata
