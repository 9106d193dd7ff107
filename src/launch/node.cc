#include "launch/node.h"

#include <ATen/Parallel.h>

#include <cstdlib>
#include <optional>

#include "common/log.h"
#include "common/timeline.h"
#include "data/load.h"
#include "launch/roles.h"
#include "run/plan.h"
#include "transport/factory.h"
#include "worker/plan_probe.h"

namespace strata {
namespace {

// What node `role` needs before it starts: the plan (sized and sharded
// only where the role uses it) and the data it loads.
struct NodeInputs {
  ClusterPlan plan;
  const DatasetSplits* data = nullptr;  // null: the role loads none
};

// `kept`: the data this process loaded in an earlier life (a scale changes
// only the worker count), or where it keeps what it loads now.
Result<NodeInputs> PrepareNode(const Config& config, Role role,
                               ClusterRunOptions options,
                               std::optional<DatasetSplits>& kept) {
  NodeInputs in;
  // The coordinator and servers learn what they need from the run facts;
  // a worker fed by the data service from the data servers'.
  const bool loads = role != Role::kCoordinator && role != Role::kServer &&
                     !(role == Role::kWorker && options.data_servers > 0);
  if (!loads) {
    in.plan.options = std::move(options);
    return in;
  }
  if (!kept) {
    ASSIGN_OR_RETURN(DatasetSplits loaded, LoadDatasetFromConfig(config));
    kept.emplace(std::move(loaded));
  }
  in.data = &*kept;
  ASSIGN_OR_RETURN(
      in.plan, MakeClusterPlan(std::move(options), config, *in.data,
                               role == Role::kWorker || role == Role::kData));
  return in;
}

// This node's transport: the coordinator binds the address the others were
// told (a host name resolved first: ZeroMQ binds addresses, not names);
// the others bind `bind` and must speak the coordinator's transport.
Result<std::unique_ptr<Transport>> NodeTransport(
    NodeId id, Role role, const std::string& coordinator,
    const std::string& bind, const std::optional<CurveKeys>& curve,
    const ClusterRunOptions& o) {
  TransportOptions options;
  options.curve = curve;
  options.links = o.links;
  options.link_seed = o.seed;
  if (role == Role::kCoordinator) {
    Result<std::string> at = ResolveBindHost(coordinator);
    if (!at.ok())
      return at.status().WithContext("--coordinator " + coordinator);
    return NewBoundTransport(id, *at, options);
  }
  options.known_peer = coordinator;
  return NewBoundTransport(id, bind, options);
}

}  // namespace

Status RoleFromRank(const Config& config, Role* role, int* index) {
  for (const char* var :
       {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"}) {
    const char* v = std::getenv(var);
    if (v == nullptr) continue;
    char* end = nullptr;
    long rank = std::strtol(v, &end, 10);
    if (*v == '\0' || *end != '\0' || rank < 0) {
      return Status::InvalidArgument("{}='{}' is not a rank", var, v);
    }
    ASSIGN_OR_RETURN(ClusterRunOptions o,
                     ClusterRunOptions::FromConfig(config));
    Status st = o.roles.RoleOf(static_cast<NodeId>(rank), role, index);
    if (!st.ok()) return st.WithContext(fmt::format("{}={}", var, rank));
    return Status::Ok();
  }
  return Status::NotFound(
      "no --role given and no MPI/Slurm rank in the environment "
      "(OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK, SLURM_PROCID)");
}

Status CheckWorkerInputs(const Config& config) {
  ASSIGN_OR_RETURN(ClusterRunOptions options,
                   ClusterRunOptions::FromConfig(config));
  if (options.data_servers > 0) return Status::Ok();  // loads no data
  // The data and the plan's arithmetic, without the shard plan (k-means
  // or PCA sharding may take seconds; each worker computes it anyway).
  Status st = [&]() -> Status {
    ASSIGN_OR_RETURN(DatasetSplits data, LoadDatasetFromConfig(config));
    return MakeClusterPlan(std::move(options), config, data,
                           /*resolve_shards=*/false)
        .status();
  }();
  return st.WithContext("worker 0 (checked before starting the nodes)");
}

Status RunNode(const Config& config, Role role, int index,
               const std::string& coordinator, const std::string& bind,
               const RunDirectory& run_dir, const std::atomic<bool>* stop,
               std::optional<DatasetSplits>* data, bool* joined) {
  ASSIGN_OR_RETURN(ClusterRunOptions options,
                   ClusterRunOptions::FromConfig(config));
  const RoleTable roles = options.roles;
  const NodeId id = roles.IdOf(role, index);
  Role check;
  int check_index;
  RETURN_IF_ERROR(roles.RoleOf(id, &check, &check_index));
  if (check != role || check_index != index) {
    return Status::InvalidArgument("{} {} does not exist in a cluster of {}",
                                   RoleName(role), index, roles.ToString());
  }
  const std::string who = roles.Describe(id);
  ASSIGN_OR_RETURN(const std::optional<CurveKeys> curve,
                   CurveKeysFromConfig(config));
  // One process per node: LibTorch threads per process as configured (0 =
  // this machine's cores shared among the workers), set before anything
  // here runs a LibTorch operator.
  // BLAS threads are the environment's: --processes sets one for its
  // children; ranks started by hand may be alone on their machine.
  if (role != Role::kCoordinator && role != Role::kServer)
    at::set_num_threads(ThreadsPerWorker(options));
  const timeline::ScopedRecording recording(options.timeline,
                                            options.timeline_events);
  std::optional<DatasetSplits> own_data;  // without a process-wide one
  ASSIGN_OR_RETURN(NodeInputs in,
                   PrepareNode(config, role, std::move(options),
                               data != nullptr ? *data : own_data));
  RoleContext ctx;
  ASSIGN_OR_RETURN(ctx.transport, NodeTransport(id, role, coordinator, bind,
                                                curve, in.plan.options));
  const char* security = curve ? " (CURVE)" : "";
  if (role == Role::kCoordinator) {
    LogInfo("{} listening at {}{}", who, ctx.transport->endpoint(), security);
  } else {
    LogInfo("{} at {} joining the coordinator at {}{}", who,
            ctx.transport->endpoint(), coordinator, security);
  }
  ctx.config = &config;
  ctx.plan = &in.plan;
  ctx.role = role;
  ctx.index = index;
  ctx.coordinator = coordinator;
  ctx.run_dir = &run_dir;
  ctx.stop = stop;
  ctx.data = in.data;
  if (joined != nullptr) *joined = true;
  Status st = RunRole(ctx);
  return role == Role::kCoordinator ? st : st.WithContext(who);
}

}  // namespace strata
