#include "cluster/roles.h"

namespace strata {

const char* RoleName(Role role) {
  switch (role) {
    case Role::kCoordinator:
      return "coordinator";
    case Role::kServer:
      return "server";
    case Role::kWorker:
      return "worker";
    case Role::kEvaluator:
      return "evaluator";
  }
  return "?";
}

Result<Role> ParseRole(const std::string& name) {
  if (name == "coordinator") return Role::kCoordinator;
  if (name == "server") return Role::kServer;
  if (name == "worker") return Role::kWorker;
  if (name == "evaluator") return Role::kEvaluator;
  return Status::InvalidArgument(
      "unknown role '{}'; one of coordinator, server, worker, evaluator", name);
}

Status ClusterShape::RoleOf(NodeId id, Role* role, int* index) const {
  if (id == 0) {
    *role = Role::kCoordinator;
    *index = 0;
  } else if (id <= num_servers) {
    *role = Role::kServer;
    *index = id - 1;
  } else if (id <= num_servers + num_workers) {
    *role = Role::kWorker;
    *index = id - 1 - num_servers;
  } else if (evaluator && id == EvaluatorId()) {
    *role = Role::kEvaluator;
    *index = 0;
  } else {
    return Status::InvalidArgument(
        "node id (or rank) {} is outside a cluster of {} nodes (1 coordinator, "
        "{} servers, {} workers{})",
        id, num_nodes(), num_servers, num_workers,
        evaluator ? ", 1 evaluator" : "");
  }
  return Status::Ok();
}

NodeId ClusterShape::IdOf(Role role, int index) const {
  switch (role) {
    case Role::kCoordinator:
      return 0;
    case Role::kServer:
      return ServerId(index);
    case Role::kWorker:
      return WorkerId(index);
    case Role::kEvaluator:
      return EvaluatorId();
  }
  return kInvalidNodeId;
}

std::string ClusterShape::Describe(NodeId id) const {
  Role role;
  int index;
  if (!RoleOf(id, &role, &index).ok()) return fmt::format("node {}", id);
  if (role == Role::kCoordinator || role == Role::kEvaluator)
    return fmt::format("{} (node {})", RoleName(role), id);
  return fmt::format("{} {} (node {})", RoleName(role), index, id);
}

}  // namespace strata
