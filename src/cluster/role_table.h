#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "transport/message.h"

namespace strata {

// kData: a data server of the mini-batch streaming service
// (docs/design/data_service.md).
enum class Role { kCoordinator, kServer, kWorker, kEvaluator, kData };
const char* RoleName(Role role);
Result<Role> ParseRole(const std::string& name);

// The role table of a cluster: which roles it has, how many nodes of each,
// and their node ids. Ids are handed out in table order, the coordinator
// first (id 0), each role's nodes consecutively; the same order maps MPI and
// Slurm ranks to roles. A role may have zero nodes (a decentralized run has
// no servers), and a new role is a new row, not new arithmetic. A value
// type; immutable once made, so safe to share between threads.
class RoleTable {
 public:
  struct Entry {
    Role role;
    int count;
    NodeId first_id;
  };

  // An empty table (no nodes at all); Make() builds a real one.
  RoleTable() = default;
  // The coordinator, then `counts` in order (a role listed twice, or with a
  // negative count, is a programming error: the later entry wins).
  static RoleTable Make(const std::vector<std::pair<Role, int>>& counts);
  // The usual table: coordinator, servers, workers, evaluator (0 or 1),
  // and data servers when there are any.
  static RoleTable Standard(int servers, int workers, bool evaluator,
                            int data_servers = 0);

  int Count(Role role) const;
  int num_servers() const { return Count(Role::kServer); }
  int num_workers() const { return Count(Role::kWorker); }
  bool has_evaluator() const { return Count(Role::kEvaluator) > 0; }
  int num_data_servers() const { return Count(Role::kData); }
  NodeId DataServerId(int i) const { return IdOf(Role::kData, i); }
  int num_nodes() const;
  const std::vector<Entry>& entries() const { return entries_; }

  NodeId CoordinatorId() const { return IdOf(Role::kCoordinator, 0); }
  NodeId ServerId(int i) const { return IdOf(Role::kServer, i); }
  NodeId WorkerId(int i) const { return IdOf(Role::kWorker, i); }
  NodeId EvaluatorId() const { return IdOf(Role::kEvaluator, 0); }
  // Every node id of `role`, in index order.
  std::vector<NodeId> Ids(Role role) const;
  // Role and index of a node id (or of an MPI rank). InvalidArgument when
  // the id is outside the cluster.
  Status RoleOf(NodeId id, Role* role, int* index) const;
  // kInvalidNodeId when the table has no such node.
  NodeId IdOf(Role role, int index) const;
  // "worker 2 (node 5)"
  std::string Describe(NodeId id) const;
  // "1 coordinator, 2 servers, 4 workers, 1 evaluator"
  std::string ToString() const;

 private:
  std::vector<Entry> entries_;
};

}  // namespace strata
