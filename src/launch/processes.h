#pragma once

#include <atomic>
#include <string>

#include "common/config.h"
#include "launch/join.h"
#include "run/run_dir.h"
#include "run/summary.h"

namespace strata {

// `strata train --processes`: the coordinator runs in this process, every
// other node is a child process (`<self> node ...`) talking over loopback
// TCP (or UCX with cluster.transport = "ucx"). The children's PIDs are
// written to <run_dir>/pids.json; children still running after the
// coordinator finished are ended (SIGTERM, then SIGKILL) by PID. With
// cluster.restart, a lost node in the free modes is started again in its
// place, and a run a lost node stopped is started again whole from the
// newest checkpoint (at most cluster.max_restarts times; the summary lists
// the restarts). Workers that asked to join (`joins`, may be null;
// launch/join.h) take new workers' slots at a scale. The nodes bind
// cluster.processes_ip. Returns the coordinator's summary, or the run's
// error.
Result<ClusterSummary> TrainProcesses(const Config& config,
                                      const RunDirectory& run_dir,
                                      const std::string& self_exe,
                                      const std::atomic<bool>* stop,
                                      JoinListener* joins);

}  // namespace strata
