#include "cluster/node.h"

#include "cluster/protocol.h"
#include "common/log.h"
#include "common/timeline_wire.h"

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
  if (msg.header.type == MessageType::kTimelineRequest) {
    // The coordinator gathers the timeline at the end of the run.
    Message reply;
    reply.header.type = MessageType::kAck;
    const std::string text = TakeTimeline();
    reply.payloads.push_back(Buffer::CopyOf(text.data(), text.size()));
    rpc_.ReplyOrLog(msg, std::move(reply));
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

std::string Node::TakeTimeline() {
  timeline::NodeTimeline t;
  t.node = rpc_.node_id();
  t.taken = timeline::Take(t.node);
  t.clock = member_.clock_offset();
  return timeline::Encode(t);
}

Status Node::SendTimeline(std::chrono::milliseconds timeout) {
  if (!timeline::On()) return Status::Ok();
  Message m;
  m.header.type = MessageType::kTimelineRequest;
  const std::string text = TakeTimeline();
  m.payloads.push_back(Buffer::CopyOf(text.data(), text.size()));
  auto r = rpc_.Request(roles_.CoordinatorId(), std::move(m))->Wait(timeout);
  if (!r.ok()) return r.status().WithContext("sending the timeline");
  return Status::Ok();
}

void Node::WaitForEnd() {
  while (!member_.WaitForShutdown(std::chrono::milliseconds(200))) {
  }
}

}  // namespace strata
