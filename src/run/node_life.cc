#include "run/node_life.h"

#include <chrono>

#include "common/log.h"

namespace strata {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Waits until the coordinator ends the run; or, when fault injection
// (cluster.fail_node) picks this node, vanishes like a crashed process
// (silent: no leave, no more heartbeats) once its time came.
Status ServeUntilTheEnd(Node& node, const ClusterRunOptions& o, Role role,
                        int index) {
  const auto due = Clock::now() + o.fail_after;
  const bool vanish = o.Vanishes(role, index);
  while (!node.member().WaitForShutdown(milliseconds(50))) {
    if (vanish && Clock::now() >= due) {
      LogWarning("{} vanishes (cluster.fail_node)",
                 o.roles.Describe(node.rpc().node_id()));
      node.Leave();
      return Status::Cancelled("{} crashed (cluster.fail_node)",
                               o.roles.Describe(node.rpc().node_id()));
    }
  }
  return Status::Ok();
}

Result<Message> RequestCheckpointState(RpcEndpoint& rpc,
                                       const ClusterRunOptions& o,
                                       const std::string& who) {
  Message m;
  m.header.type = MessageType::kRestoreRequest;
  auto reply = rpc.Request(o.roles.CoordinatorId(), std::move(m))
                   ->Wait(o.request_timeout);
  if (!reply.ok())
    return reply.status().WithContext(who +
                                      ": asking for its checkpoint state");
  return std::move(reply).value();
}

}  // namespace strata
