#include "cluster/node.h"

#include "cluster/protocol.h"
#include "common/log.h"

namespace strata {

Node::Node(std::unique_ptr<Transport> transport, RoleTable roles,
           std::chrono::milliseconds heartbeat_interval,
           std::chrono::milliseconds heartbeat_timeout)
    : roles_(roles),
      rpc_(std::move(transport), [this](Message m) { Dispatch(std::move(m)); }),
      member_(rpc_, roles_, heartbeat_interval, heartbeat_timeout) {}

Node::~Node() { Leave(); }

void Node::On(MessageType type, Handler handler) {
  handlers_[type] = std::move(handler);
}

void Node::Dispatch(Message msg) {
  if (msg.header.type == MessageType::kShutdown) {
    member_.OnMessage(msg);
  }
  if (msg.header.type == MessageType::kNodeRejoined) {
    // A restarted node is back at a new address: move there, and send it
    // again what its predecessor never answered.
    const NodeId id = static_cast<NodeId>(msg.header.clock);
    const std::string endpoint =
        msg.payloads.empty() ? std::string() : msg.payloads[0].ToString();
    Status st = rpc_.transport().Connect(id, endpoint);
    if (!st.ok()) {
      LogWarning("{}: cannot reach the restarted {} at {}: {}",
                 roles_.Describe(rpc_.node_id()), roles_.Describe(id), endpoint,
                 st.message());
      return;
    }
    const int resent = rpc_.Resend(id);
    LogInfo("{}: {} restarted at {}; {} request(s) sent again",
            roles_.Describe(rpc_.node_id()), roles_.Describe(id), endpoint,
            resent);
    return;
  }
  auto it = handlers_.find(msg.header.type);
  if (it != handlers_.end()) {
    it->second(std::move(msg));
    return;
  }
  if (msg.header.type != MessageType::kShutdown) {
    LogWarning(
        "{}: ignoring unexpected {} from {}", roles_.Describe(rpc_.node_id()),
        MessageTypeName(msg.header.type), roles_.Describe(msg.header.sender));
  }
}

Status Node::Join(
    const std::string& coordinator_endpoint, std::chrono::milliseconds timeout,
    const std::string& run_facts,
    const std::function<Status(const std::string&)>& on_run_facts) {
  rpc_.Start();
  RETURN_IF_ERROR(
      member_.Join(coordinator_endpoint, timeout, run_facts, on_run_facts));
  member_.StartHeartbeats();
  return Status::Ok();
}

void Node::Leave() {
  if (left_) return;
  left_ = true;
  member_.StopHeartbeats();
  rpc_.Stop();
}

void Node::WaitForEnd() {
  while (!member_.WaitForShutdown(std::chrono::milliseconds(200))) {
  }
}

}  // namespace strata
