#pragma once

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/status.h"
#include "run/scale_request.h"

namespace strata {

// What `strata scale` saw: how long after the request the run trained
// again on the new worker count.
struct ScaleOutcome {
  int from = 0, to = 0;
  int64_t step = 0;  // the checkpoint it resumed at
  double since_request_s = 0;
};

// `strata scale RUN_DIR --workers N` (docs/design/elastic.md): checks the
// run's config allows it (coordinator/resize_restore.h's CheckScale), asks
// the running coordinator (run/scale_request.h), and waits, at most
// `timeout` for each, for the request to be taken and for the run to train
// again on `workers`. DeadlineExceeded saying which wait ran out (a request
// nobody took is withdrawn); FailedPrecondition / InvalidArgument for a run
// that cannot scale so; NotFound for a directory that is not a run.
// `stop` (may be null; Ctrl-C) withdraws a request not taken yet and
// returns Cancelled.
// `leaving` (`strata scale --drain I`): these workers leave and the others
// go on, renumbered in order; `workers` may then be 0 (the run's count less
// the leavers). InvalidArgument for neither a count nor a drain.
// `data_servers` (`--data-servers M`, > 0): the run goes on with M data
// servers too (coordinator/resize_restore.h's CheckScale says when not);
// `workers` may then be 0 (the same count).
Result<ScaleOutcome> ScaleRun(const std::string& run_dir, int workers,
                              std::chrono::milliseconds timeout,
                              const std::atomic<bool>* stop = nullptr,
                              const std::vector<int>& leaving = {},
                              int data_servers = 0);

// The launcher, after a life of the run ended: the request the coordinator
// stopped it for (`strata scale`, or cluster.leave_on_loss), taken from
// `run_dir`, with `life` (the config it ran with) set to go on from its
// checkpoint on the new count and the workers that stay
// (checkpoint.resume_workers). nullopt when there is none, or when `stop`
// (may be null) was set: the run ends.
Result<std::optional<ScaleRequest>> TakeScale(const std::string& run_dir,
                                              const std::atomic<bool>* stop,
                                              Config* life);

}  // namespace strata
