#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "transport/message.h"

namespace strata {

enum class Role { kCoordinator, kServer, kWorker, kEvaluator };
const char* RoleName(Role role);
Result<Role> ParseRole(const std::string& name);

// Node ids follow from the cluster's shape: coordinator 0, servers 1..k,
// workers k+1..k+n, the evaluator k+n+1 (the same order as MPI ranks).
struct ClusterShape {
  int num_servers = 1;
  int num_workers = 1;
  bool evaluator = true;

  int num_nodes() const {
    return 1 + num_servers + num_workers + (evaluator ? 1 : 0);
  }
  NodeId CoordinatorId() const { return 0; }
  NodeId ServerId(int i) const { return 1 + i; }
  NodeId WorkerId(int i) const { return 1 + num_servers + i; }
  NodeId EvaluatorId() const { return 1 + num_servers + num_workers; }
  // Role and index of a node id (or of an MPI rank). InvalidArgument when
  // the id is outside the cluster.
  Status RoleOf(NodeId id, Role* role, int* index) const;
  NodeId IdOf(Role role, int index) const;
  // "worker 2 (node 5)"
  std::string Describe(NodeId id) const;
};

}  // namespace strata
