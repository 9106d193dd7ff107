#pragma once

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cluster/role_table.h"
#include "common/mutex.h"
#include "coordinator/restarts.h"
#include "coordinator/worker_set.h"
#include "run/run_facts.h"
#include "transport/rpc.h"

namespace strata {

// What the membership part needs to know of the run.
struct MembershipOptions {
  RoleTable roles;
  // A lost server may be replaced (cluster.restart) while this is > 0.
  std::chrono::milliseconds server_restart_timeout{0};
  // A lost worker may re-join under its id (cluster.restart, free modes).
  bool worker_restart = false;
};

// A node the monitor found silent (Membership::FindLost).
struct LostNode {
  NodeId id = kInvalidNodeId;
  Role role = Role::kWorker;
  bool joined = false;  // registered before it went silent
  double silent_s = 0;
  // A server the run waits to see replaced (cluster.restart): awaited in
  // Restarts from the moment it was found lost.
  bool awaited = false;
};

// The coordinator's membership part: rendezvous (nodes register their
// endpoints and, once all have, get everyone else's; then say they
// connected to every peer), the run facts the nodes announce (merged;
// disagreement refused, naming both nodes), heartbeats (when each node was
// last heard from), which nodes were lost or reported done, and the
// re-join of a replacement (with Restarts, whose lock it may take while
// holding its own: the one lock order between the coordinator's parts).
// Thread-safe; replies go through `rpc`.
class Membership {
 public:
  using Clock = std::chrono::steady_clock;

  Membership(MembershipOptions options, RpcEndpoint& rpc, Restarts& restarts)
      : o_(std::move(options)), rpc_(rpc), restarts_(restarts) {}

  // `id` was heard from now; returns when it was before (now for a node
  // never heard from).
  Clock::time_point Seen(NodeId id) EXCLUDES(mu_);
  // kRegister, either phase; `prev_seen` is when the sender was heard from
  // before this message (a replacement's down time starts there).
  void Register(Message msg, Clock::time_point prev_seen) EXCLUDES(mu_);
  // A worker reported done, with its metrics as text (may be empty);
  // `leaving`: it is gone, and no shutdown goes to it.
  void MarkDone(NodeId id, std::string report, bool leaving) EXCLUDES(mu_);
  // Marks lost, and returns, every node silent for longer than the
  // heartbeat timeout (registered) or the join timeout (never registered,
  // counted from `started`); a lost server that may be replaced
  // (cluster.restart) is awaited in Restarts at once, under the same lock
  // as its registration takes it back.
  std::vector<LostNode> FindLost(Clock::time_point now,
                                 Clock::time_point started,
                                 Clock::duration heartbeat_timeout,
                                 Clock::duration join_timeout) EXCLUDES(mu_);

  WorkerSet Workers() const EXCLUDES(mu_);
  std::vector<NodeId> LostIds() const EXCLUDES(mu_);
  bool IsLost(NodeId id) const EXCLUDES(mu_);
  // The registered nodes not lost nor left (a shutdown goes to them).
  std::vector<NodeId> Reachable() const EXCLUDES(mu_);
  std::map<NodeId, std::string> DoneReports() const EXCLUDES(mu_);

 private:
  // The first phase: an endpoint (and maybe run facts) from a node.
  void RegisterEndpoint(Message msg, Clock::time_point prev_seen) EXCLUDES(mu_);
  // A node registering after the rendezvous: a replacement, or a stranger.
  void RegisterReplacement(Message msg, const std::string& endpoint, Role role,
                           Clock::time_point prev_seen) EXCLUDES(mu_);
  // The second phase ("connected to every peer"); false (and `msg` left
  // as it is) once the rendezvous is over: a replacement's.
  bool RegisterConnected(Message& msg) EXCLUDES(mu_);
  // A replacement finished connecting: the others move to it.
  void ReplacementConnected(Message msg) EXCLUDES(mu_);
  // Merges the run facts of msg.payloads[1]; the error to reply otherwise.
  Status MergeRunFacts(const Message& msg) REQUIRES(mu_);
  // The cluster map a registration's reply carries (JSON text: every
  // node's endpoint and the run facts).
  std::string ClusterMapLocked() const REQUIRES(mu_);
  static void Reply(RpcEndpoint& rpc, const Message& to,
                    const std::string& map);

  const MembershipOptions o_;
  RpcEndpoint& rpc_;
  Restarts& restarts_;
  mutable Mutex mu_;
  std::map<NodeId, std::string> endpoints_ GUARDED_BY(mu_);
  std::vector<Message> waiting_register_ GUARDED_BY(mu_);
  std::vector<Message> waiting_connected_ GUARDED_BY(mu_);
  bool rendezvous_done_ GUARDED_BY(mu_) = false;
  bool connected_done_ GUARDED_BY(mu_) = false;
  std::map<NodeId, Clock::time_point> last_seen_ GUARDED_BY(mu_);
  std::set<NodeId> lost_ GUARDED_BY(mu_);
  std::set<NodeId> done_ GUARDED_BY(mu_);
  std::set<NodeId> left_ GUARDED_BY(mu_);  // done, and gone
  std::map<NodeId, std::string> done_reports_ GUARDED_BY(mu_);
  // The union of the run facts announced, and who announced them first.
  RunFacts run_facts_ GUARDED_BY(mu_);
  NodeId run_facts_from_ GUARDED_BY(mu_) = kInvalidNodeId;
};

}  // namespace strata
