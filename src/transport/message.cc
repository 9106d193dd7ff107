#include "transport/message.h"

#include <fmt/format.h>

namespace strata {

namespace {

// Every named type, with its name.
struct NamedType {
  MessageType type;
  const char* name;
};
constexpr NamedType kNames[] = {
    {MessageType::kInvalid, "invalid"},
    {MessageType::kRegister, "register"},
    {MessageType::kRegisterReply, "register_reply"},
    {MessageType::kHeartbeat, "heartbeat"},
    {MessageType::kPush, "push"},
    {MessageType::kPullRequest, "pull_request"},
    {MessageType::kPullReply, "pull_reply"},
    {MessageType::kBarrier, "barrier"},
    {MessageType::kBarrierRelease, "barrier_release"},
    {MessageType::kClock, "clock"},
    {MessageType::kShutdown, "shutdown"},
    {MessageType::kAck, "ack"},
    {MessageType::kError, "error"},
    {MessageType::kClusterMap, "cluster_map"},
    {MessageType::kCheckpoint, "checkpoint"},
    {MessageType::kModelExchange, "model_exchange"},
    {MessageType::kStatsRequest, "stats_request"},
    {MessageType::kStatsReply, "stats_reply"},
    {MessageType::kFinalEvalRequest, "final_eval_request"},
    {MessageType::kFinalEvalReply, "final_eval_reply"},
    {MessageType::kStoreSet, "store_set"},
    {MessageType::kStoreGet, "store_get"},
    {MessageType::kNodeLost, "node_lost"},
    {MessageType::kNodeRejoined, "node_rejoined"},
    {MessageType::kPeerModel, "peer_model"},
    {MessageType::kGossipModel, "gossip_model"},
    {MessageType::kGossipDone, "gossip_done"},
    {MessageType::kModelRequest, "model_request"},
    {MessageType::kTreeModel, "tree_model"},
    {MessageType::kPeerAck, "peer_ack"},
    {MessageType::kBatchRequest, "batch_request"},
    {MessageType::kBatchReply, "batch_reply"},
    {MessageType::kCheckpointArrive, "checkpoint_arrive"},
    {MessageType::kCheckpointPause, "checkpoint_pause"},
    {MessageType::kRestoreRequest, "restore_request"},
    {MessageType::kCheckpointRequest, "checkpoint_request"},
    {MessageType::kTimelineRequest, "timeline_request"},
    {MessageType::kMetricsLine, "metrics_line"},
};

}  // namespace

std::string MessageTypeName(MessageType type) {
  for (const NamedType& t : kNames)
    if (t.type == type) return t.name;
  const auto value = static_cast<uint16_t>(type);
  if (IsValidMessageType(type)) return fmt::format("user({})", value);
  return fmt::format("unknown({})", value);
}

bool IsValidMessageType(MessageType type) {
  const auto value = static_cast<uint16_t>(type);
  if (value >= 1 &&
      value <= static_cast<uint16_t>(MessageType::kLastBuiltInType)) {
    return true;
  }
  return value >= static_cast<uint16_t>(MessageType::kFirstUserType) &&
         value <= static_cast<uint16_t>(MessageType::kLastUserType);
}

bool operator==(const MessageHeader& a, const MessageHeader& b) {
  return a.type == b.type && a.flags == b.flags && a.sender == b.sender &&
         a.receiver == b.receiver && a.request_id == b.request_id &&
         a.key_begin == b.key_begin && a.key_end == b.key_end &&
         a.clock == b.clock;
}

uint64_t Message::payload_bytes() const {
  uint64_t total = 0;
  for (const Buffer& b : payloads) total += b.size();
  return total;
}

Status ValidateOutgoing(const Message& msg, const MessageLimits& limits) {
  const MessageHeader& h = msg.header;
  if (!IsValidMessageType(h.type)) {
    return Status::InvalidArgument("message type {} is not a valid type",
                                   MessageTypeName(h.type));
  }
  if (h.key_begin > h.key_end) {
    return Status::InvalidArgument(
        "{} message has key range [{}, {}) with begin > end",
        MessageTypeName(h.type), h.key_begin, h.key_end);
  }
  if (msg.payloads.size() > limits.max_payloads) {
    return Status::InvalidArgument("{} message has {} payloads (limit {})",
                                   MessageTypeName(h.type), msg.payloads.size(),
                                   limits.max_payloads);
  }
  if (msg.payload_bytes() > limits.max_message_bytes) {
    return Status::InvalidArgument(
        "{} message carries {} payload bytes (limit {})",
        MessageTypeName(h.type), msg.payload_bytes(), limits.max_message_bytes);
  }
  return Status::Ok();
}

}  // namespace strata
