#pragma once

#include <cstddef>
#include <cstdint>

#include "transport/message.h"

namespace strata {

// How the parameter-server messages use the generic header:
//   kPush         key range = the server's range, clock = base version,
//                 payload 0 = gradients (float32). flags kPushInit: payload 0
//                 is the initial parameters instead (sent once, by worker 0).
//   kAck          reply to kPush: clock = the range's version after it;
//                 flags kAckDropped when a late gradient was dropped, and
//                 kAckPending never leaves the server (the ack waits for the
//                 step to close).
//   kPullRequest  clock = the minimum version wanted (the reply waits until
//                 the range reaches it).
//   kPullReply    clock = the version of the range's parameters, which are
//                 the payloads concatenated in order (one payload, or
//                 chunks of PullReplyChunkBytes(); see below).
//   kStatsRequest / kStatsReply: payload 0 = the server's statistics as JSON.
inline constexpr uint32_t kPushInit = 1u << 0;
inline constexpr uint32_t kAckDropped = 1u << 1;
// kPush with kPushDone and no payload: the sending worker has finished (or
// is leaving); sync steps stop waiting for its gradients.
inline constexpr uint32_t kPushDone = 1u << 2;

// A pull reply larger than one chunk is sent as consecutive payloads of
// this many bytes (the last one shorter). 1 MiB is ZmqOptions::frame_bytes'
// default: a payload of at most one frame reaches the receiver without
// being reassembled (copied) into one buffer, so the client copies each
// byte once, into its destination. A range is cut into at most
// kMaxPullReplyChunks chunks (well under MessageLimits::max_payloads); a
// larger range gets larger chunks.
inline constexpr size_t kPullReplyChunkBytes = size_t{1} << 20;
inline constexpr size_t kMaxPullReplyChunks = 512;
inline size_t PullReplyChunkBytes(size_t range_bytes) {
  const size_t per_chunk =
      (range_bytes + kMaxPullReplyChunks - 1) / kMaxPullReplyChunks;
  return (per_chunk + kPullReplyChunkBytes - 1) / kPullReplyChunkBytes *
         kPullReplyChunkBytes;
}

inline constexpr MessageType kStatsRequest = static_cast<MessageType>(
    static_cast<uint16_t>(MessageType::kFirstUserType) + 1);
inline constexpr MessageType kStatsReply = static_cast<MessageType>(
    static_cast<uint16_t>(MessageType::kFirstUserType) + 2);

}  // namespace strata
