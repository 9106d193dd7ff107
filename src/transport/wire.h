#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "common/status.h"
#include "transport/buffer.h"
#include "transport/message.h"
#include "transport/placement.h"

// The byte-level format of messages on a stream transport (ZeroMQ tcp / ipc),
// and the pure functions that produce and check it. No I/O here: the ZeroMQ
// backend moves the frames, this file decides what they mean. See
// docs/design/transport.md for the layout.
//
// A message travels as one or more *segments*; a segment is one ZeroMQ
// multipart message (a list of frames, delivered atomically). The first
// segment starts with the header frame, later ones with a 16-byte continuation
// frame; the rest of every segment are data frames. Concatenated in order, the
// data frames are the payloads, each payload cut into frames of at most
// `frame_bytes` (a frame never spans two payloads; empty payloads have no
// frame). Small messages fit in one segment; a large one becomes one segment
// per frame, so the receiver can copy frame k while frame k+1 is still on the
// wire.
//
// All integers are little-endian.
namespace strata::wire {

inline constexpr uint32_t kHeaderMagic = 0x4D525453;        // "STRM"
inline constexpr uint32_t kContinuationMagic = 0x43525453;  // "STRC"
inline constexpr uint16_t kVersion = 1;
inline constexpr size_t kFixedHeaderBytes = 64;
inline constexpr size_t kContinuationBytes = 16;
inline constexpr size_t kDefaultFrameBytes = size_t{1} << 20;
// A payload that arrives as one frame at least this large, suitably aligned,
// is handed over as is instead of being copied.
inline constexpr size_t kAdoptMinBytes = 32 * 1024;

// Size of the header frame for `num_payloads` payloads: 64 + 8 per payload.
size_t EncodedHeaderBytes(size_t num_payloads);

// A header frame, decoded and validated.
struct DecodedHeader {
  MessageHeader header;
  uint32_t transfer_id = 0;  // sender's per-connection message counter
  std::vector<uint64_t> payload_sizes;
  uint64_t payload_bytes = 0;  // their sum
};

// Encodes a header frame. Does not validate (see ValidateOutgoing()), so tests
// can build malformed frames on purpose.
Buffer EncodeHeader(const MessageHeader& header,
                    const std::vector<uint64_t>& payload_sizes,
                    uint32_t transfer_id);

// Decodes and validates a header frame: length, magic, version, type, payload
// count and sizes within `limits` (sum checked without overflow), declared
// length equal to the frame length, non-negative sender and receiver, key
// range begin <= end. kDataLoss naming the first fault otherwise. Never reads
// outside [data, data + size). Pure; thread-safe.
Result<DecodedHeader> DecodeHeader(const uint8_t* data, size_t size,
                                   const MessageLimits& limits);

struct Continuation {
  uint32_t transfer_id = 0;
  uint32_t segment_index = 0;  // 1 for the second segment of a message
};
Buffer EncodeContinuation(const Continuation& c);
// kDataLoss unless `size` is 16 and magic and version match.
Result<Continuation> DecodeContinuation(const uint8_t* data, size_t size);

// One ZeroMQ multipart message worth of frames.
using Segment = std::vector<Buffer>;

// Cuts `msg` into segments as described above. Data frames are zero-copy
// views that keep the payload alive; only the header and continuation frames
// are new memory. Does not validate (call ValidateOutgoing() first).
// `frame_bytes` must be > 0.
std::vector<Segment> EncodeSegments(Message msg, uint32_t transfer_id,
                                    size_t frame_bytes);

// Rebuilds messages from the segments of one ordered stream (one connection).
// Every segment is checked before its bytes are used; a bad one is rejected
// with kDataLoss, the message in progress (if any) is dropped with it, and the
// assembler is ready for the next message: garbage can cost messages, never
// memory safety. Large aligned frames are adopted without a copy: a payload
// that came as one such frame is that frame, and one that came as several is
// a gathered Buffer of them (Buffer::Gather), so the receiver can work on the
// pieces in place. A payload whose first frame is small or unaligned is
// copied into one contiguous buffer (from `pool` when large).
//
// Not thread-safe: one receiving thread owns it.
class MessageAssembler {
 public:
  struct Options {
    MessageLimits limits;
    // When >= 0, a header for another receiver is rejected (misrouted).
    NodeId expected_receiver = kInvalidNodeId;
    // Large payload buffers come from here; null means the heap.
    std::shared_ptr<BufferPool> pool;
    // Asked once per message, with its validated header: a payload it
    // places is written into the placement frame by frame as the frames
    // arrive, and delivered as a view of the placement's memory (empty if
    // the placement was revoked meanwhile). A placement whose index or size
    // does not match the header is ignored. Null: no placement.
    PlacementLookup placement;
  };

  explicit MessageAssembler(Options options);
  MessageAssembler(const MessageAssembler&) = delete;
  MessageAssembler& operator=(const MessageAssembler&) = delete;
  MessageAssembler(MessageAssembler&&) = default;
  MessageAssembler& operator=(MessageAssembler&&) = default;

  // Feeds the frames of one segment (consumed: left empty). Returns the
  // message this segment completed, std::nullopt while more segments are due,
  // or kDataLoss naming the fault (segment and partial message dropped).
  // When a new message begins while another is unfinished (its sender gave up
  // half way), the old one is dropped, `*abandoned` (if not null) is set to a
  // kDataLoss saying so, and the new one proceeds; otherwise `*abandoned` is
  // set to OK.
  Result<std::optional<Message>> Add(std::vector<Buffer>* frames,
                                     Status* abandoned);

  // True between the first and the last segment of a message.
  bool in_progress() const { return pending_.has_value(); }
  // Bytes of the message in progress received so far / expected.
  uint64_t pending_received() const;
  uint64_t pending_expected() const;
  // Drops the message in progress, if any.
  void Reset() { pending_.reset(); }

 private:
  struct Pending {
    DecodedHeader decoded;
    std::vector<Buffer> payloads;
    // The frames of the payload being filled, when it is gathered rather
    // than copied (its first frame was large and aligned).
    std::vector<Buffer> pieces;
    bool gathering = false;
    // Where payload placement->payload_index() goes, if anywhere;
    // `placement_failed` once a write was refused (revoked).
    std::shared_ptr<PayloadPlacement> placement;
    bool placement_failed = false;
    size_t index = 0;     // payload being filled
    uint64_t offset = 0;  // bytes of it received
    uint64_t received = 0;
    uint32_t next_segment = 1;
  };

  // A header frame: the message it begins becomes the one in progress (one
  // unfinished before it is dropped, saying so in *abandoned). kDataLoss for
  // a bad or misrouted header.
  Status BeginMessage(const Buffer& first, Status* abandoned);
  // A continuation frame (of a segment of `frames` frames): checks it
  // continues the message in progress. kDataLoss otherwise.
  Status ContinueMessage(const Buffer& first, size_t frames);
  Status ConsumeDataFrame(Buffer frame);
  // Skips over payloads that are complete; true when all are.
  bool AdvanceComplete();
  std::string Describe() const;

  Options options_;
  std::optional<Pending> pending_;
};

}  // namespace strata::wire
