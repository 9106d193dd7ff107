#pragma once

#include <cstdint>
#include <vector>

#include "ps/compression.h"
#include "ps/optimizer.h"
#include "transport/message.h"

namespace strata {

// How the parameter-server messages use the generic header:
//   kPush         key range = the server's range, clock = base version,
//                 payload 0 = gradients (float32). flags kPushInit: payload 0
//                 is the initial parameters instead (sent once, by worker 0).
//   kAck          reply to kPush: clock = the range's version after it;
//                 flags kAckDropped when a late gradient was dropped, and
//                 kAckPending never leaves the server (the ack waits for the
//                 step to close). An applied gradient's ack has payload 0 =
//                 two int64: the number of gradients in its update (the step
//                 size) and its staleness (the version it was applied at
//                 minus its base version; a sender may be older and send the
//                 step size alone).
//   kPullRequest  clock = the minimum version wanted (the reply waits until
//                 the range reaches it).
//   kPullReply    clock = the version of payload 0 (the range's parameters).
//   kStatsRequest / kStatsReply: payload 0 = the server's statistics as JSON.
inline constexpr uint32_t kPushInit = 1u << 0;
inline constexpr uint32_t kAckDropped = 1u << 1;
// kPush with kPushDone and no payload: the sending worker has finished (or
// is leaving); sync steps stop waiting for its gradients.
inline constexpr uint32_t kPushDone = 1u << 2;
// kPush with kPushRejoin and no payload: a worker that left (kPushDone) to
// wait in a checkpoint round pushes again; sync steps count it again. Sync
// k-of-n workers do this around every round in the middle of a run
// (docs/design/checkpoints.md), so that the steps of those still training close
// without them.
inline constexpr uint32_t kPushRejoin = 1u << 8;
// Sync k-of-n with several ranges (shard.h, UpdatePolicy::follower): a
// worker pushes to the lead range first; the leader's ack carries, in
// payload 0, the number of gradients (int64) in the step that used it. The
// worker then pushes to every other range with kPushTagged: clock = that
// step (the leader's version after it, minus one), payload 0 = gradients,
// payload 1 = the step's size (int64), then a compressed pull's mirror
// sequence number (kPullDelta). A tagged kPushPull's ack, sent once the
// step closed, carries the step size (staleness 0: the leader's ack has the
// gradient's) and the parameters, as any push-pull's.
inline constexpr uint32_t kPushTagged = 1u << 3;
// kPush with kPushPull: the ack also carries the range's parameters just
// after this gradient was applied (sync: just after the step it joined
// closed), as payload 1 (payload 0 is the step size as for any applied
// push): a push and the pull that follows it in one round trip, as
// ps-lite's ZPushPull. The ack's clock is the version of those parameters.
inline constexpr uint32_t kPushPull = 1u << 4;
// Compressed gradients (cluster.compression; ps/compression.h,
// docs/design/compression.md): a kPush of gradients (never kPushInit) with
// kPushFp16 or kPushInt8 carries payload 0 encoded with that codec
// (CompressedBytes(codec, range size) bytes) instead of float32. The
// server decodes it and applies it like any push; acks and pulls are
// unchanged.
inline constexpr uint32_t kPushFp16 = 1u << 5;
inline constexpr uint32_t kPushInt8 = 1u << 6;
// The flag naming codec `c` (0 for kNone), and the codec `flags` name
// (kNone for neither flag, and for both, which no sender sets).
inline uint32_t CodecFlag(Compression c) {
  return c == Compression::kFp16   ? kPushFp16
         : c == Compression::kInt8 ? kPushInt8
                                   : 0;
}
inline Compression CodecOfFlags(uint32_t flags) {
  switch (flags & (kPushFp16 | kPushInt8)) {
    case kPushFp16:
      return Compression::kFp16;
    case kPushInt8:
      return Compression::kInt8;
    default:
      return Compression::kNone;
  }
}
// Compressed pulls (cluster.compress_pulls): parameters come back as the
// difference to what the worker already holds. The server keeps, per
// worker, a mirror of the worker's copy of its range and a sequence number
// for it; the worker keeps the same mirror and number.
//   kPullRequest with kPullDelta and kPushFp16 or kPushInt8 (the codec):
//     payload 0 = int64, the sequence number of the worker's mirror (0:
//     none yet). kPush with kPushPull and kPullDelta: that int64 is the
//     push's last payload.
//   The reply (kPullReply; kAck of a push-pull, after the step info) ends
//     with the range, then int64 {base, new} sequence numbers. With
//     kPullDelta set on the reply, the range is (parameters - mirror)
//     encoded with the codec, to be decoded and added to the mirror of
//     sequence `base`; the server adds the same decoded values to its own
//     mirror, so both stay equal bit for bit and the error of one reply is
//     made up by the next. Without it (the numbers differed: a first pull,
//     a lost reply, a restarted server), the range is float32 parameters
//     and replaces the mirror.
inline constexpr uint32_t kPullDelta = 1u << 7;
// Checkpoints (docs/design/checkpoints.md):
//   kCheckpointRequest  coordinator -> server; the reply (kAck) holds the
//                       server's state: payload 0 = JSON {"version",
//                       "optimizer_steps", "range", "stats"}, payload 1 =
//                       safetensors with "params" and "optimizer/<buffer>"
//                       (ParameterServer::SaveState). A server without
//                       parameters yet answers with an error.

// The float pieces of a payload (see Buffer::Gather and FloatPiece), to work
// on a gradient or a pull reply where it landed instead of joining it first.
// A payload whose pieces are not whole, 4-byte-aligned floats is joined
// (one copy) and given as one piece.
inline std::vector<FloatPiece> FloatPieces(const Buffer& payload) {
  std::vector<FloatPiece> pieces;
  bool whole_floats = true;
  payload.ForEachPiece([&](size_t offset, const uint8_t* data, size_t size) {
    whole_floats = whole_floats && offset % sizeof(float) == 0 &&
                   size % sizeof(float) == 0 &&
                   reinterpret_cast<uintptr_t>(data) % alignof(float) == 0;
    pieces.push_back({static_cast<int64_t>(offset / sizeof(float)),
                      reinterpret_cast<const float*>(data),
                      static_cast<int64_t>(size / sizeof(float))});
  });
  if (!whole_floats) {
    pieces.assign(
        1, {0, payload.floats(), static_cast<int64_t>(payload.num_floats())});
  }
  return pieces;
}

}  // namespace strata
