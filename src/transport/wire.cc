#include "transport/wire.h"

#include <cstring>
#include <utility>

namespace strata::wire {
namespace {

// Explicit little-endian stores and loads: the format does not depend on the
// host's byte order, and loads are bounds-checked by the callers' length
// checks before any of these run.
void Put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
void Put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void Put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint16_t Get16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (uint16_t{p[1]} << 8));
}
uint32_t Get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{p[i]} << (8 * i);
  return v;
}
uint64_t Get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

// Field offsets in the fixed header.
constexpr size_t kOffMagic = 0;
constexpr size_t kOffVersion = 4;
constexpr size_t kOffType = 6;
constexpr size_t kOffFlags = 8;
constexpr size_t kOffSender = 12;
constexpr size_t kOffReceiver = 16;
constexpr size_t kOffNumPayloads = 20;
constexpr size_t kOffRequestId = 24;
constexpr size_t kOffKeyBegin = 32;
constexpr size_t kOffKeyEnd = 40;
constexpr size_t kOffClock = 48;
constexpr size_t kOffTransferId = 56;
constexpr size_t kOffHeaderBytes = 60;
static_assert(kOffHeaderBytes + 4 == kFixedHeaderBytes);

bool AlignedForAdoption(const uint8_t* p) {
  return reinterpret_cast<uintptr_t>(p) % 8 == 0;
}

}  // namespace

size_t EncodedHeaderBytes(size_t num_payloads) {
  return kFixedHeaderBytes + 8 * num_payloads;
}

Buffer EncodeHeader(const MessageHeader& header,
                    const std::vector<uint64_t>& payload_sizes,
                    uint32_t transfer_id) {
  const size_t bytes = EncodedHeaderBytes(payload_sizes.size());
  Buffer out = Buffer::Allocate(bytes);
  uint8_t* p = out.data();
  Put32(p + kOffMagic, kHeaderMagic);
  Put16(p + kOffVersion, kVersion);
  Put16(p + kOffType, static_cast<uint16_t>(header.type));
  Put32(p + kOffFlags, header.flags);
  Put32(p + kOffSender, static_cast<uint32_t>(header.sender));
  Put32(p + kOffReceiver, static_cast<uint32_t>(header.receiver));
  Put32(p + kOffNumPayloads, static_cast<uint32_t>(payload_sizes.size()));
  Put64(p + kOffRequestId, header.request_id);
  Put64(p + kOffKeyBegin, static_cast<uint64_t>(header.key_begin));
  Put64(p + kOffKeyEnd, static_cast<uint64_t>(header.key_end));
  Put64(p + kOffClock, static_cast<uint64_t>(header.clock));
  Put32(p + kOffTransferId, transfer_id);
  Put32(p + kOffHeaderBytes, static_cast<uint32_t>(bytes));
  for (size_t i = 0; i < payload_sizes.size(); ++i) {
    Put64(p + kFixedHeaderBytes + 8 * i, payload_sizes[i]);
  }
  return out;
}

Result<DecodedHeader> DecodeHeader(const uint8_t* data, size_t size,
                                   const MessageLimits& limits) {
  if (size < kFixedHeaderBytes) {
    return Status::DataLoss(
        "header frame of {} bytes is shorter than the {}-byte fixed header",
        size, kFixedHeaderBytes);
  }
  const uint32_t magic = Get32(data + kOffMagic);
  if (magic != kHeaderMagic) {
    return Status::DataLoss(
        "header frame has magic {:#010x}, expected {:#010x}", magic,
        kHeaderMagic);
  }
  const uint16_t version = Get16(data + kOffVersion);
  if (version != kVersion) {
    return Status::DataLoss(
        "header frame has wire version {}, this node speaks version {}",
        version, kVersion);
  }
  DecodedHeader out;
  MessageHeader& h = out.header;
  h.type = static_cast<MessageType>(Get16(data + kOffType));
  if (!IsValidMessageType(h.type)) {
    return Status::DataLoss("header frame has message type {}",
                            MessageTypeName(h.type));
  }
  h.flags = Get32(data + kOffFlags);
  h.sender = static_cast<NodeId>(Get32(data + kOffSender));
  h.receiver = static_cast<NodeId>(Get32(data + kOffReceiver));
  if (h.sender < 0 || h.receiver < 0) {
    return Status::DataLoss("{} header has sender {} and receiver {}",
                            MessageTypeName(h.type), h.sender, h.receiver);
  }
  const uint32_t num_payloads = Get32(data + kOffNumPayloads);
  if (num_payloads > limits.max_payloads) {
    return Status::DataLoss("{} header declares {} payloads (limit {})",
                            MessageTypeName(h.type), num_payloads,
                            limits.max_payloads);
  }
  const size_t expected_bytes = EncodedHeaderBytes(num_payloads);
  const uint32_t declared_bytes = Get32(data + kOffHeaderBytes);
  if (declared_bytes != expected_bytes || size != expected_bytes) {
    return Status::DataLoss(
        "{} header frame is {} bytes and declares {}, but {} payloads need {}",
        MessageTypeName(h.type), size, declared_bytes, num_payloads,
        expected_bytes);
  }
  h.request_id = Get64(data + kOffRequestId);
  h.key_begin = static_cast<int64_t>(Get64(data + kOffKeyBegin));
  h.key_end = static_cast<int64_t>(Get64(data + kOffKeyEnd));
  if (h.key_begin > h.key_end) {
    return Status::DataLoss("{} header has key range [{}, {}) with begin > end",
                            MessageTypeName(h.type), h.key_begin, h.key_end);
  }
  h.clock = static_cast<int64_t>(Get64(data + kOffClock));
  out.transfer_id = Get32(data + kOffTransferId);
  out.payload_sizes.resize(num_payloads);
  for (uint32_t i = 0; i < num_payloads; ++i) {
    const uint64_t s = Get64(data + kFixedHeaderBytes + 8 * size_t{i});
    // Each term is bounded before it is added, so the sum cannot overflow.
    if (s > limits.max_message_bytes ||
        out.payload_bytes + s > limits.max_message_bytes) {
      return Status::DataLoss(
          "{} header: payload {} of {} bytes takes the message past {} bytes",
          MessageTypeName(h.type), i, s, limits.max_message_bytes);
    }
    out.payload_sizes[i] = s;
    out.payload_bytes += s;
  }
  return out;
}

Buffer EncodeContinuation(const Continuation& c) {
  Buffer out = Buffer::Allocate(kContinuationBytes);
  uint8_t* p = out.data();
  Put32(p, kContinuationMagic);
  Put16(p + 4, kVersion);
  Put16(p + 6, 0);
  Put32(p + 8, c.transfer_id);
  Put32(p + 12, c.segment_index);
  return out;
}

Result<Continuation> DecodeContinuation(const uint8_t* data, size_t size) {
  if (size != kContinuationBytes) {
    return Status::DataLoss("continuation frame of {} bytes, expected {}", size,
                            kContinuationBytes);
  }
  if (Get32(data) != kContinuationMagic) {
    return Status::DataLoss("continuation frame has magic {:#010x}",
                            Get32(data));
  }
  if (Get16(data + 4) != kVersion || Get16(data + 6) != 0) {
    return Status::DataLoss(
        "continuation frame has wire version {} (reserved {}), this node "
        "speaks version {}",
        Get16(data + 4), Get16(data + 6), kVersion);
  }
  Continuation c;
  c.transfer_id = Get32(data + 8);
  c.segment_index = Get32(data + 12);
  return c;
}

std::vector<Segment> EncodeSegments(Message msg, uint32_t transfer_id,
                                    size_t frame_bytes) {
  std::vector<uint64_t> sizes;
  sizes.reserve(msg.payloads.size());
  for (const Buffer& b : msg.payloads) sizes.push_back(b.size());

  std::vector<Segment> segments(1);
  segments[0].push_back(EncodeHeader(msg.header, sizes, transfer_id));
  size_t segment_data = 0;
  for (Buffer& payload : msg.payloads) {
    if (payload.empty()) continue;
    uint8_t* data = payload.data();
    const size_t size = payload.size();
    std::shared_ptr<void> owner = std::move(payload).Release();
    for (size_t off = 0; off < size; off += frame_bytes) {
      const size_t n = std::min(frame_bytes, size - off);
      // Small frames share a segment; once a segment holds a frame's worth of
      // data the next frame opens a new one, so big payloads go one frame per
      // segment and the receiver can work on each as it lands.
      if (segment_data > 0 && segment_data + n > frame_bytes) {
        Segment next;
        next.push_back(EncodeContinuation(
            {transfer_id, static_cast<uint32_t>(segments.size())}));
        segments.push_back(std::move(next));
        segment_data = 0;
      }
      segments.back().push_back(Buffer::Adopt(data + off, n, owner));
      segment_data += n;
    }
  }
  return segments;
}

MessageAssembler::MessageAssembler(Options options)
    : options_(std::move(options)) {}

uint64_t MessageAssembler::pending_received() const {
  return pending_ ? pending_->received : 0;
}

uint64_t MessageAssembler::pending_expected() const {
  return pending_ ? pending_->decoded.payload_bytes : 0;
}

std::string MessageAssembler::Describe() const {
  if (!pending_) return "no message";
  const MessageHeader& h = pending_->decoded.header;
  return fmt::format("{} message from node {} (transfer {}, {} of {} bytes)",
                     MessageTypeName(h.type), h.sender,
                     pending_->decoded.transfer_id, pending_->received,
                     pending_->decoded.payload_bytes);
}

bool MessageAssembler::AdvanceComplete() {
  Pending& p = *pending_;
  const std::vector<uint64_t>& sizes = p.decoded.payload_sizes;
  while (p.index < sizes.size() && p.offset == sizes[p.index]) {
    ++p.index;
    p.offset = 0;
  }
  return p.index == sizes.size();
}

Status MessageAssembler::ConsumeDataFrame(Buffer frame) {
  if (AdvanceComplete()) {
    return Status::DataLoss(
        "{}: a data frame of {} bytes follows the last "
        "declared payload byte",
        Describe(), frame.size());
  }
  Pending& p = *pending_;
  if (frame.empty()) {
    return Status::DataLoss("{}: empty data frame", Describe());
  }
  const uint64_t payload_size = p.decoded.payload_sizes[p.index];
  const uint64_t left = payload_size - p.offset;
  if (frame.size() > left) {
    return Status::DataLoss(
        "{}: data frame of {} bytes overruns payload {} ({} bytes left)",
        Describe(), frame.size(), p.index, left);
  }
  const size_t n = frame.size();
  Buffer& dest = p.payloads[p.index];
  if (p.placement && p.placement->payload_index() == p.index) {
    // Received in place: into the owner's memory now, the frame freed.
    if (!p.placement_failed && !p.placement->Write(p.offset, frame.data(), n)) {
      p.placement_failed = true;
    }
    if (p.offset + n == payload_size && !p.placement_failed) {
      dest = Buffer::Adopt(p.placement->dest(), payload_size, p.placement);
    }
    p.offset += n;
    p.received += n;
    return Status::Ok();
  }
  const bool adoptable =
      n >= kAdoptMinBytes && AlignedForAdoption(frame.data());
  if (p.offset == 0 && n == payload_size && adoptable) {
    dest = std::move(frame);
  } else if (p.gathering || (p.offset == 0 && adoptable)) {
    // Keep the frames as they are; a small or unaligned one among them is
    // copied into a piece of its own.
    p.gathering = true;
    p.pieces.push_back(adoptable ? std::move(frame)
                                 : Buffer::CopyOf(frame.data(), n));
    if (p.offset + n == payload_size) {
      dest = Buffer::Gather(std::move(p.pieces));
      p.pieces.clear();
      p.gathering = false;
    }
  } else {
    if (p.offset == 0) {
      dest = (options_.pool && payload_size >= BufferPool::kMinCapacity)
                 ? options_.pool->Acquire(payload_size)
                 : Buffer::Allocate(payload_size);
    }
    std::memcpy(dest.data() + p.offset, frame.data(), n);
  }
  p.offset += n;
  p.received += n;
  return Status::Ok();
}

Status MessageAssembler::BeginMessage(const Buffer& first, Status* abandoned) {
  Result<DecodedHeader> decoded =
      DecodeHeader(first.data(), first.size(), options_.limits);
  if (!decoded.ok()) {
    if (pending_ && abandoned != nullptr) {
      *abandoned =
          Status::DataLoss("{} dropped: a bad header followed", Describe());
    }
    return decoded.status();
  }
  if (options_.expected_receiver >= 0 &&
      decoded->header.receiver != options_.expected_receiver) {
    if (pending_ && abandoned != nullptr) {
      *abandoned = Status::DataLoss("{} dropped: a misrouted header followed",
                                    Describe());
    }
    return Status::DataLoss(
        "{} message from node {} is addressed to node {}, this is node {}",
        MessageTypeName(decoded->header.type), decoded->header.sender,
        decoded->header.receiver, options_.expected_receiver);
  }
  if (pending_ && abandoned != nullptr) {
    *abandoned = Status::DataLoss(
        "{} dropped unfinished: the next message began", Describe());
  }
  // Moved in: clang refuses to default-construct it in place (its member
  // initializers are not usable in the enclosing class's std::optional).
  pending_.emplace(Pending{});
  pending_->decoded = std::move(decoded).value();
  pending_->payloads.resize(pending_->decoded.payload_sizes.size());
  if (options_.placement) {
    std::shared_ptr<PayloadPlacement> placement =
        options_.placement(pending_->decoded.header);
    if (placement && placement->Fits(pending_->decoded.payload_sizes)) {
      pending_->placement = std::move(placement);
    }
  }
  return Status::Ok();
}

Status MessageAssembler::ContinueMessage(const Buffer& first, size_t frames) {
  Result<Continuation> c = DecodeContinuation(first.data(), first.size());
  if (!c.ok()) return c.status().WithContext(Describe());
  if (!pending_) {
    return Status::DataLoss(
        "continuation segment {} of transfer {} arrived with no message in "
        "progress",
        c->segment_index, c->transfer_id);
  }
  if (c->transfer_id != pending_->decoded.transfer_id ||
      c->segment_index != pending_->next_segment) {
    return Status::DataLoss(
        "{}: expected segment {} of transfer {}, got segment {} of "
        "transfer {}",
        Describe(), pending_->next_segment, pending_->decoded.transfer_id,
        c->segment_index, c->transfer_id);
  }
  if (frames < 2) {
    return Status::DataLoss("{}: continuation segment without data",
                            Describe());
  }
  ++pending_->next_segment;
  return Status::Ok();
}

Result<std::optional<Message>> MessageAssembler::Add(
    std::vector<Buffer>* frames, Status* abandoned) {
  if (abandoned != nullptr) *abandoned = Status::Ok();
  std::vector<Buffer> segment = std::move(*frames);
  frames->clear();
  auto fail = [this](Status s) -> Status {
    pending_.reset();
    return s;
  };
  if (segment.empty()) return fail(Status::DataLoss("empty segment"));

  const Buffer& first = segment[0];
  const uint32_t magic =
      first.size() >= 4
          ? (uint32_t{first.data()[0]} | uint32_t{first.data()[1]} << 8 |
             uint32_t{first.data()[2]} << 16 | uint32_t{first.data()[3]} << 24)
          : 0;
  Status started;
  if (magic == kHeaderMagic) {
    started = BeginMessage(first, abandoned);
  } else if (magic == kContinuationMagic) {
    started = ContinueMessage(first, segment.size());
  } else {
    started = Status::DataLoss(
        "segment starts with a {}-byte frame that is neither a header nor a "
        "continuation (magic {:#010x}){}",
        first.size(), magic,
        pending_ ? "; dropped the " + Describe() + " in progress" : "");
  }
  if (!started.ok()) return fail(started);

  for (size_t i = 1; i < segment.size(); ++i) {
    Status s = ConsumeDataFrame(std::move(segment[i]));
    if (!s.ok()) return fail(s);
  }
  if (!AdvanceComplete()) return std::optional<Message>();

  Message msg;
  msg.header = pending_->decoded.header;
  msg.payloads = std::move(pending_->payloads);
  pending_.reset();
  return std::optional<Message>(std::move(msg));
}

}  // namespace strata::wire
