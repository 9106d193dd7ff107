#include "cluster/role_table.h"

#include <fmt/format.h>

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
    case Role::kData:
      return "data";
  }
  return "?";
}

namespace {

// How a role reads in messages ("data server 0", "2 data servers").
std::string Noun(Role role) {
  return role == Role::kData ? "data server" : RoleName(role);
}

}  // namespace

Result<Role> ParseRole(const std::string& name) {
  if (name == "coordinator") return Role::kCoordinator;
  if (name == "server") return Role::kServer;
  if (name == "worker") return Role::kWorker;
  if (name == "evaluator") return Role::kEvaluator;
  if (name == "data") return Role::kData;
  return Status::InvalidArgument(
      "unknown role '{}'; one of coordinator, server, worker, evaluator, data",
      name);
}

RoleTable RoleTable::Make(const std::vector<std::pair<Role, int>>& counts) {
  RoleTable t;
  t.entries_.push_back({Role::kCoordinator, 1, 0});
  for (const auto& [role, count] : counts) {
    if (role == Role::kCoordinator) continue;
    bool replaced = false;
    for (Entry& e : t.entries_) {
      if (e.role == role) {
        e.count = std::max(0, count);
        replaced = true;
      }
    }
    if (!replaced) t.entries_.push_back({role, std::max(0, count), 0});
  }
  NodeId next = 0;
  for (Entry& e : t.entries_) {
    e.first_id = next;
    next += static_cast<NodeId>(e.count);
  }
  return t;
}

RoleTable RoleTable::Standard(int servers, int workers, bool evaluator,
                              int data_servers) {
  std::vector<std::pair<Role, int>> rows = {
      {Role::kServer, servers},
      {Role::kWorker, workers},
      {Role::kEvaluator, evaluator ? 1 : 0}};
  // Last, so that the ids of the other roles do not depend on it.
  if (data_servers > 0) rows.emplace_back(Role::kData, data_servers);
  return Make(rows);
}

int RoleTable::Count(Role role) const {
  for (const Entry& e : entries_) {
    if (e.role == role) return e.count;
  }
  return 0;
}

int RoleTable::num_nodes() const {
  int n = 0;
  for (const Entry& e : entries_) n += e.count;
  return n;
}

std::vector<NodeId> RoleTable::Ids(Role role) const {
  std::vector<NodeId> ids;
  for (const Entry& e : entries_) {
    if (e.role != role) continue;
    for (int i = 0; i < e.count; ++i)
      ids.push_back(e.first_id + static_cast<NodeId>(i));
  }
  return ids;
}

Status RoleTable::RoleOf(NodeId id, Role* role, int* index) const {
  for (const Entry& e : entries_) {
    if (id >= e.first_id && id < e.first_id + static_cast<NodeId>(e.count)) {
      *role = e.role;
      *index = static_cast<int>(id - e.first_id);
      return Status::Ok();
    }
  }
  return Status::InvalidArgument(
      "node id (or rank) {} is outside a cluster of {} nodes ({})", id,
      num_nodes(), ToString());
}

NodeId RoleTable::IdOf(Role role, int index) const {
  for (const Entry& e : entries_) {
    if (e.role == role && index >= 0 && index < e.count)
      return e.first_id + static_cast<NodeId>(index);
  }
  return kInvalidNodeId;
}

std::string RoleTable::Describe(NodeId id) const {
  Role role;
  int index;
  if (!RoleOf(id, &role, &index).ok()) return fmt::format("node {}", id);
  if (Count(role) == 1 &&
      (role == Role::kCoordinator || role == Role::kEvaluator))
    return fmt::format("{} (node {})", RoleName(role), id);
  return fmt::format("{} {} (node {})", Noun(role), index, id);
}

std::string RoleTable::ToString() const {
  std::string out;
  for (const Entry& e : entries_) {
    if (!out.empty()) out += ", ";
    out +=
        fmt::format("{} {}{}", e.count, Noun(e.role), e.count == 1 ? "" : "s");
  }
  return out;
}

}  // namespace strata
