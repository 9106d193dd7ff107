#pragma once

#include <atomic>
#include <nlohmann/json.hpp>
#include <string>

#include "cluster/roles.h"
#include "common/config.h"
#include "train/run_dir.h"

namespace strata {

// Runs one node of a multi-process cluster (`strata node`) over ZeroMQ TCP:
// the coordinator binds `coordinator` itself; every other node binds
// `bind` (e.g. "tcp://10.0.0.5:*": the address the other nodes reach it
// at) and joins the coordinator. Servers need no data; workers and the
// evaluator load the dataset the config names. Returns when the run ends;
// an error names the role, the node and what failed.
Status RunNode(const Config& config, Role role, int index,
               const std::string& coordinator, const std::string& bind,
               const RunDirectory& run_dir, const std::atomic<bool>* stop);

// The role and index of this process from an MPI or Slurm rank
// (OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK or SLURM_PROCID): rank 0 is
// the coordinator, 1..k the servers, then the workers, the last rank the
// evaluator. NotFound when no rank variable is set; InvalidArgument when
// the rank does not fit the cluster the config describes.
Status RoleFromRank(const Config& config, Role* role, int* index);

// `strata train --processes`: the coordinator runs in this process, every
// other node is a child process (`<self> node ...`) talking over loopback
// TCP. The children's PIDs are written to <run_dir>/pids.json; children
// still running after the coordinator finished are ended (SIGTERM, then
// SIGKILL) by PID. Returns the coordinator's summary (or its error).
Result<nlohmann::json> TrainProcesses(const Config& config,
                                      const RunDirectory& run_dir,
                                      const std::string& self_exe,
                                      const std::atomic<bool>* stop);

}  // namespace strata
