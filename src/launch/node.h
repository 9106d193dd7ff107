#pragma once

#include <atomic>
#include <optional>
#include <string>

#include "cluster/role_table.h"
#include "common/config.h"
#include "data/dataset.h"
#include "run/run_dir.h"

namespace strata {

// Runs one node of a multi-process cluster (`strata node`): the coordinator
// binds `coordinator` itself; every other node binds `bind` (e.g.
// "tcp://10.0.0.5:*": the address the other nodes reach it at) and joins
// the coordinator. Servers and the coordinator load no data, nor does a
// worker the data service feeds; other workers, data servers and the
// evaluator load the dataset the config names. Returns when the run ends;
// an error names the role, the node and what failed.
// `data` (may be null): the dataset this process loaded in an earlier
// life of the run, kept across lives (a scale changes only the worker
// count); loaded into it when empty.
// `joined` (may be null): set once the node's setup (its data, its plan,
// its transport) is done and it goes to join the run; an error with it
// false is the node's own, which another life with the same config would
// meet again.
Status RunNode(const Config& config, Role role, int index,
               const std::string& coordinator, const std::string& bind,
               const RunDirectory& run_dir, const std::atomic<bool>* stop,
               std::optional<DatasetSplits>* data = nullptr,
               bool* joined = nullptr);

// What a worker node would do before it joins, done here and dropped: it
// loads the dataset the config names and plans the run for worker 0 (the
// model against the data's shape). --processes calls it before it starts
// the nodes, so that bad data or a model that does not fit it fails the
// run at once with the node's reason, rather than after the coordinator's
// join timeout. A worker the data service feeds loads nothing: OK then.
Status CheckWorkerInputs(const Config& config);

// The role and index of this process from an MPI or Slurm rank
// (OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK or SLURM_PROCID): rank 0 is
// the coordinator, 1..k the servers, then the workers, the evaluator, the
// data servers (RoleTable::Standard's order). NotFound when no rank
// variable is set; InvalidArgument when the rank does not fit the cluster
// the config describes.
Status RoleFromRank(const Config& config, Role* role, int* index);

}  // namespace strata
