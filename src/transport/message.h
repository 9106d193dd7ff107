#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "transport/buffer.h"

namespace strata {

// A node of a cluster (coordinator, server, worker, evaluator). Ids are
// non-negative and assigned by the coordinator (or by hand in tests).
using NodeId = int32_t;
inline constexpr NodeId kInvalidNodeId = -1;

// What a message is for. Values are part of the wire format: never renumber,
// only append. Values from kFirstUserType to kLastUserType belong to the
// layers above the transport; those in use are named below, the rest pass
// validation unnamed.
enum class MessageType : uint16_t {
  kInvalid = 0,
  kRegister = 1,       // a node announces itself to the coordinator
  kRegisterReply = 2,  // node id and cluster map
  kHeartbeat = 3,
  kPush = 4,            // gradients (or elastic differences) for a key range
  kPullRequest = 5,     // ask for the parameters of a key range
  kPullReply = 6,       // parameters of a key range plus their version
  kBarrier = 7,         // a node reached a barrier
  kBarrierRelease = 8,  // everyone reached it
  kClock = 9,           // a worker finished an iteration (bounded staleness)
  kShutdown = 10,
  kAck = 11,         // generic success reply (matching request_id)
  kError = 12,       // generic failure reply; payload 0 holds the message text
  kClusterMap = 13,  // key ranges -> servers, node endpoints
  kCheckpoint = 14,  // save / saved
  kModelExchange = 15,  // peer-to-peer models (gossip, dpsgd, easgd)
  kLastBuiltInType = kModelExchange,

  kFirstUserType = 0x1000,

  // The types of the layers above, every one of them here (one list, so no
  // two layers pick the same number). Each is described where it is
  // handled: ps/protocol.h (statistics, server checkpoints), collective/
  // store.h (the rendezvous store), cluster/protocol.h (membership and
  // checkpoint rounds), exchange/exchange.h (peer models), dataservice/
  // batch_stream.h (batches), worker/evaluator_role.cc (the final
  // evaluation).
  kStatsRequest = 0x1001,
  kStatsReply = 0x1002,
  kFinalEvalRequest = 0x1003,
  kFinalEvalReply = 0x1004,
  kStoreSet = 0x100A,
  kStoreGet = 0x100B,
  kNodeLost = 0x100C,
  kNodeRejoined = 0x100D,
  kPeerModel = 0x1014,
  kGossipModel = 0x1015,
  kGossipDone = 0x1016,
  kModelRequest = 0x1017,
  kTreeModel = 0x1018,
  kPeerAck = 0x1019,
  kBatchRequest = 0x101E,
  kBatchReply = 0x101F,
  kCheckpointArrive = 0x1028,
  kCheckpointPause = 0x1029,
  kRestoreRequest = 0x102A,
  kCheckpointRequest = 0x102B,
  kTimelineRequest = 0x102C,
  kMetricsLine = 0x102D,  // a worker's metrics.jsonl line, to the coordinator

  kLastUserType = 0x1FFF,
};

// "push", "pull_request", ..., "user(4101)" (0x1005, an unnamed user type),
// or "unknown(77)".
std::string MessageTypeName(MessageType type);
// True for the named types above and the user range; false for kInvalid and
// anything else.
bool IsValidMessageType(MessageType type);

// The fixed fields of a message. The transport fills `sender` and `receiver`
// on Send(); everything else is the caller's. Payload sizes are not stored
// here: they are the sizes of Message::payloads (and travel on the wire).
struct MessageHeader {
  MessageType type = MessageType::kInvalid;
  uint32_t flags = 0;  // meaning defined per type by the layer above
  NodeId sender = kInvalidNodeId;
  NodeId receiver = kInvalidNodeId;
  uint64_t request_id = 0;  // pairs replies with requests
  int64_t key_begin = 0;    // key range [key_begin, key_end), begin <= end
  int64_t key_end = 0;
  int64_t clock = 0;  // iteration clock or parameter version
};

bool operator==(const MessageHeader& a, const MessageHeader& b);
inline bool operator!=(const MessageHeader& a, const MessageHeader& b) {
  return !(a == b);
}

// A header and its payloads. Move-only (the payloads are Buffers): sending a
// message gives it away.
struct Message {
  MessageHeader header;
  std::vector<Buffer> payloads;

  // Sum of the payload sizes.
  uint64_t payload_bytes() const;
};

// Bounds applied to every message sent and received, so that a corrupt or
// hostile header cannot make a node allocate without limit.
struct MessageLimits {
  uint32_t max_payloads = 1024;
  uint64_t max_message_bytes = uint64_t{4} << 30;  // sum of payload sizes
};

// Checks what a sender controls: a valid type, key_begin <= key_end, the
// payload count and total size within `limits`. kInvalidArgument naming the
// fault otherwise. Pure; thread-safe.
Status ValidateOutgoing(const Message& msg, const MessageLimits& limits);

}  // namespace strata
