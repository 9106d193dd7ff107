#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cluster/role_table.h"
#include "common/config.h"
#include "data/dataset.h"
#include "run/checkpoint.h"
#include "run/plan.h"
#include "run/run_dir.h"
#include "run/summary.h"
#include "transport/transport.h"

namespace strata {

class CollectiveHub;

// Everything one node of a cluster is given, whatever launched it (threads
// in one process, `--processes`, `strata node`, an MPI or Slurm rank): the
// one launcher (src/launch) fills it and runs the role's function from its
// role table. Every pointer outlives the role's function.
struct RoleContext {
  const Config* config = nullptr;
  // The run's plan: always the options; the key layout where the node
  // sized the model; the shards where it resolved them.
  const ClusterPlan* plan = nullptr;
  Role role = Role::kWorker;
  int index = 0;
  // This node's transport, bound; the role takes it.
  std::unique_ptr<Transport> transport;
  // Where the coordinator listens (the other nodes join it there).
  std::string coordinator;
  const RunDirectory* run_dir = nullptr;
  const std::atomic<bool>* stop = nullptr;  // may be null
  // The data the node loaded (null for servers, the coordinator and a
  // worker the data service feeds).
  const DatasetSplits* data = nullptr;
  // The threads launcher's hub: workers that are threads of one process
  // form their collective groups through memory (collective/inproc.h).
  // Null where each node is a process of its own.
  CollectiveHub* collectives = nullptr;
  // The coordinator: the checkpoint CheckResumable returned (null: read
  // the newest with checkpoint.resume).
  std::shared_ptr<const Checkpoint> resume_from;
  // What roles hand back: the coordinator its summary (left empty when it
  // stopped before it had one), the evaluator the final parameters. May be
  // null.
  std::optional<ClusterSummary>* summary = nullptr;
  std::vector<float>* final_params = nullptr;

  const ClusterRunOptions& options() const { return plan->options; }
  std::string who() const {
    return plan->options.roles.Describe(plan->options.roles.IdOf(role, index));
  }
};

// A role's main function: returns when the run ends; an error names the
// node and what failed.
using RoleMain = Status (*)(RoleContext& ctx);

}  // namespace strata
