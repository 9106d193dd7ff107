#include "transport/message.h"

#include <fmt/format.h>

namespace strata {

std::string MessageTypeName(MessageType type) {
  switch (type) {
    case MessageType::kInvalid:
      return "invalid";
    case MessageType::kRegister:
      return "register";
    case MessageType::kRegisterReply:
      return "register_reply";
    case MessageType::kHeartbeat:
      return "heartbeat";
    case MessageType::kPush:
      return "push";
    case MessageType::kPullRequest:
      return "pull_request";
    case MessageType::kPullReply:
      return "pull_reply";
    case MessageType::kBarrier:
      return "barrier";
    case MessageType::kBarrierRelease:
      return "barrier_release";
    case MessageType::kClock:
      return "clock";
    case MessageType::kShutdown:
      return "shutdown";
    case MessageType::kAck:
      return "ack";
    case MessageType::kError:
      return "error";
    case MessageType::kClusterMap:
      return "cluster_map";
    case MessageType::kCheckpoint:
      return "checkpoint";
    case MessageType::kModelExchange:
      return "model_exchange";
    case MessageType::kStatsRequest:
      return "stats_request";
    case MessageType::kStatsReply:
      return "stats_reply";
    case MessageType::kFinalEvalRequest:
      return "final_eval_request";
    case MessageType::kFinalEvalReply:
      return "final_eval_reply";
    case MessageType::kStoreSet:
      return "store_set";
    case MessageType::kStoreGet:
      return "store_get";
    case MessageType::kNodeLost:
      return "node_lost";
    case MessageType::kNodeRejoined:
      return "node_rejoined";
    case MessageType::kPeerModel:
      return "peer_model";
    case MessageType::kGossipModel:
      return "gossip_model";
    case MessageType::kGossipDone:
      return "gossip_done";
    case MessageType::kModelRequest:
      return "model_request";
    case MessageType::kTreeModel:
      return "tree_model";
    case MessageType::kBatchRequest:
      return "batch_request";
    case MessageType::kBatchReply:
      return "batch_reply";
    case MessageType::kCheckpointArrive:
      return "checkpoint_arrive";
    case MessageType::kCheckpointPause:
      return "checkpoint_pause";
    case MessageType::kRestoreRequest:
      return "restore_request";
    case MessageType::kCheckpointRequest:
      return "checkpoint_request";
    case MessageType::kTimelineRequest:
      return "timeline_request";
    default:
      break;
  }
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
