#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "cluster/member.h"
#include "cluster/role_table.h"
#include "transport/rpc.h"

namespace strata {

// One node of a cluster: owns its endpoint and its membership, and routes
// each incoming message type to the handler registered for it (a
// coordinator's shutdown to the membership; a peer's model, a model
// request, ... to the role). A message type nobody handles is logged and
// dropped. Handlers run on the endpoint's thread, in arrival order, and
// must not block for long. On() before Join(); the rest is thread-safe.
// The destructor leaves (stops heartbeats, joins the endpoint's thread).
class Node {
 public:
  using Handler = std::function<void(Message)>;

  Node(std::unique_ptr<Transport> transport, RoleTable roles,
       std::chrono::milliseconds heartbeat_interval,
       std::chrono::milliseconds heartbeat_timeout);
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Routes messages of `type` to `handler`. Before Join() only.
  void On(MessageType type, Handler handler);
  // Starts the endpoint, registers with the coordinator (waits for every
  // node, up to `timeout`) and starts heartbeats. The error names the node
  // and what it waited for.
  // `run_facts`, `on_run_facts`: as ClusterMember::Join.
  Status Join(
      const std::string& coordinator_endpoint,
      std::chrono::milliseconds timeout, const std::string& run_facts = "",
      const std::function<Status(const std::string&)>& on_run_facts = nullptr);
  // Stops heartbeats and the endpoint: the node goes silent (the
  // coordinator notices as it would a crash unless it reported done).
  void Leave();
  // Waits until the coordinator ends the run (or is lost).
  void WaitForEnd();
  // With the timeline on (common/timeline.h): sends this node's spans so far
  // to the coordinator, for a node about to leave before the run's end (a
  // worker). A no-op while off.
  Status SendTimeline(std::chrono::milliseconds timeout);

  // What the node reports with its heartbeats (ClusterMember); before
  // Join().
  void SetStatusSource(std::function<std::string()> source) {
    member_.SetStatusSource(std::move(source));
  }
  RpcEndpoint& rpc() { return rpc_; }
  ClusterMember& member() { return member_; }
  const RoleTable& roles() const { return roles_; }

 private:
  void Dispatch(Message msg);
  // This node's spans so far, taken out, with its clock offset (text).
  std::string TakeTimeline();

  const RoleTable roles_;
  std::map<MessageType, Handler> handlers_;  // written before Join() only
  RpcEndpoint rpc_;
  ClusterMember member_;
  bool left_ = false;
};

}  // namespace strata
