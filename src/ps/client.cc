#include "ps/client.h"

#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "ps/protocol.h"

namespace strata {
namespace {

// The node of each range: servers[i] is server i's node.
std::vector<NodeId> RangeNodes(const KeyLayout& layout,
                               const std::vector<NodeId>& servers) {
  STRATA_CHECK(static_cast<int>(servers.size()) == layout.num_servers());
  std::vector<NodeId> out;
  for (int i = 0; i < layout.num_ranges(); ++i)
    out.push_back(servers[static_cast<size_t>(layout.owner(i))]);
  return out;
}

}  // namespace

PsClient::PsClient(RpcEndpoint& rpc, KeyLayout layout,
                   std::vector<NodeId> servers, bool leader_first,
                   int lead_range)
    : rpc_(rpc),
      layout_(std::move(layout)),
      servers_(RangeNodes(layout_, servers)),
      leader_first_(leader_first && servers_.size() > 1),
      lead_(lead_range) {
  STRATA_CHECK(lead_ >= 0 && lead_ < layout_.num_ranges());
}

void PsClient::SetCompression(Compression c, bool pulls) {
  compression_ = c;
  compress_pulls_ = pulls && c != Compression::kNone;
  mirrors_.assign(compress_pulls_ ? layout_.num_ranges() : 0, PullMirror{});
  feedback_.clear();
  if (c != Compression::kInt8) return;
  for (int s = 0; s < layout_.num_ranges(); ++s)
    feedback_.emplace_back(c, static_cast<size_t>(layout_.range(s).size()));
}

std::vector<std::vector<float>> PsClient::Residuals() const {
  std::vector<std::vector<float>> out;
  for (const ErrorFeedback& f : feedback_) out.push_back(f.residual());
  return out;
}

Status PsClient::RestoreResiduals(
    const std::vector<std::vector<float>>& residuals) {
  if (residuals.size() != feedback_.size()) {
    return Status::InvalidArgument(
        "{} error-feedback residuals for {} ranges (cluster.compression = "
        "\"{}\")",
        residuals.size(), feedback_.size(), CompressionName(compression_));
  }
  for (size_t i = 0; i < residuals.size(); ++i) {
    if (residuals[i].size() != feedback_[i].size()) {
      return Status::InvalidArgument(
          "error-feedback residual {} has {} values; range {} has {}", i,
          residuals[i].size(), i, feedback_[i].size());
    }
    feedback_[i].SetResidual(residuals[i]);
  }
  return Status::Ok();
}

std::unique_ptr<PushHandle> PsClient::SendPush(
    const float* values, const std::vector<int64_t>& versions, uint32_t flags,
    const std::shared_ptr<void>& keep_alive) {
  auto handle = std::make_unique<PushHandle>();
  SendRanges(*handle, values, versions, flags, 0, layout_.num_ranges(), nullptr,
             keep_alive);
  return handle;
}

void PsClient::SendRanges(PushHandle& handle, const float* values,
                          const std::vector<int64_t>& versions, uint32_t flags,
                          int first, int last, const int64_t* step_size,
                          const std::shared_ptr<void>& keep_alive) {
  for (int s = first; s < last; ++s) {
    const KeyRange& r = layout_.range(s);
    Message m;
    m.header.type = MessageType::kPush;
    m.header.flags = flags;
    m.header.key_begin = r.begin;
    m.header.key_end = r.end;
    m.header.clock = versions.empty() ? 0 : versions[s];
    const size_t bytes = sizeof(float) * static_cast<size_t>(r.size());
    const bool encode =
        compression_ != Compression::kNone && !(flags & kPushInit);
    if (encode) {
      // Encoded (a copy): the caller's buffer is free once this returns.
      const size_t n = static_cast<size_t>(r.size());
      Buffer encoded = Buffer::Allocate(CompressedBytes(compression_, n));
      if (feedback_.empty()) {
        Encode(compression_, values + r.begin, n, encoded.data());
      } else {  // int8: with error feedback
        feedback_[static_cast<size_t>(s)].Encode(values + r.begin,
                                                 encoded.data());
      }
      m.header.flags |= CodecFlag(compression_);
      handle.bytes_ += encoded.size();
      m.payloads.push_back(std::move(encoded));
    } else if (bytes >= BufferPool::kMinCapacity) {
      // Zero copy: the caller keeps `values` unchanged until Wait() returns
      // (client.h), and `keep_alive` (if any) keeps the memory valid until
      // the transport lets go of it, even after a failed Wait().
      m.payloads.push_back(Buffer::Adopt(const_cast<float*>(values + r.begin),
                                         bytes, keep_alive));
    } else {
      m.payloads.push_back(Buffer::CopyOf(values + r.begin, bytes));
    }
    if (step_size != nullptr) {
      m.payloads.push_back(Buffer::CopyOf(step_size, sizeof(int64_t)));
    }
    if (!encode) handle.bytes_ += bytes;
    handle.ranges_.push_back(r);
    handle.indices_.push_back(s);
    std::shared_ptr<PayloadPlacement> placement;
    if (handle.dest_ != nullptr && compress_pulls_) {
      // The parameters come back as a difference (protocol.h, kPullDelta).
      m.header.flags |= kPullDelta;
      m.payloads.push_back(Buffer::CopyOf(&mirrors_[static_cast<size_t>(s)].seq,
                                          sizeof(int64_t)));
    } else if (handle.dest_ != nullptr) {
      // The ack's parameters (payload 1) are received in place.
      placement = std::make_shared<PayloadPlacement>(
          1, reinterpret_cast<uint8_t*>(handle.dest_ + r.begin), bytes);
      handle.placements_.push_back(placement);
    }
    const InlineSendScope fan_out(InlineOnlyAtLastNode(s, last));
    handle.calls_.push_back(
        rpc_.Request(servers_[s], std::move(m), std::move(placement)));
  }
}

std::unique_ptr<PushHandle> PsClient::Push(
    const float* grads, const std::vector<int64_t>& base_versions,
    std::shared_ptr<void> keep_alive) {
  STRATA_CHECK(static_cast<int>(base_versions.size()) == layout_.num_ranges());
  if (!leader_first_) return SendPush(grads, base_versions, 0, keep_alive);
  return SendLeaderFirst(grads, base_versions, nullptr, std::move(keep_alive));
}

std::unique_ptr<PushHandle> PsClient::SendLeaderFirst(
    const float* grads, const std::vector<int64_t>& base_versions, float* dest,
    std::shared_ptr<void> keep_alive) {
  // Phase one: the leader alone; Wait() sends the rest, tagged.
  auto handle = std::make_unique<PushHandle>();
  handle->dest_ = dest;
  SendRanges(*handle, grads, base_versions, dest != nullptr ? kPushPull : 0,
             lead_, lead_ + 1, nullptr, keep_alive);
  handle->client_ = this;
  handle->leader_first_ = true;
  handle->grads_ = grads;
  handle->keep_alive_ = std::move(keep_alive);
  return handle;
}

std::unique_ptr<PushHandle> PsClient::PushPull(
    const float* grads, const std::vector<int64_t>& base_versions, float* dest,
    std::shared_ptr<void> keep_alive) {
  STRATA_CHECK(static_cast<int>(base_versions.size()) == layout_.num_ranges());
  STRATA_CHECK(dest != nullptr && dest != grads);
  if (leader_first_)
    return SendLeaderFirst(grads, base_versions, dest, std::move(keep_alive));
  auto handle = std::make_unique<PushHandle>();
  handle->dest_ = dest;
  handle->client_ = this;
  SendRanges(*handle, grads, base_versions, kPushPull, 0, layout_.num_ranges(),
             nullptr, keep_alive);
  return handle;
}

std::unique_ptr<PushHandle> PsClient::BeginPush(
    const std::vector<int64_t>& base_versions, float* dest,
    std::shared_ptr<void> keep_alive) {
  STRATA_CHECK(static_cast<int>(base_versions.size()) == layout_.num_ranges());
  auto handle = std::make_unique<PushHandle>();
  handle->dest_ = dest;
  handle->client_ = this;
  handle->versions_ = base_versions;
  handle->keep_alive_ = std::move(keep_alive);
  return handle;
}

Status PsClient::PushRange(PushHandle& handle, int range, const float* grads,
                           std::chrono::milliseconds timeout) {
  STRATA_CHECK(handle.client_ == this && range >= 0 &&
               range < layout_.num_ranges());
  const uint32_t pull = handle.dest_ != nullptr ? kPushPull : 0;
  if (!leader_first_) {
    SendRanges(handle, grads, handle.versions_, pull, range, range + 1, nullptr,
               handle.keep_alive_);
    return Status::Ok();
  }
  if (range != lead_) {
    if (handle.lead_ack_ == nullptr) {
      handle.before_lead_.push_back(range);
    } else {
      SendTagged(handle, grads, pull, range, range + 1);
    }
    return Status::Ok();
  }
  STRATA_CHECK(handle.lead_ack_ == nullptr);
  SendRanges(handle, grads, handle.versions_, pull, lead_, lead_ + 1, nullptr,
             handle.keep_alive_);
  // The lead's ack comes when the step its gradient joined closes (or at
  // once, dropped); its call leaves the handle, Wait() reads the ack kept.
  std::shared_ptr<RpcCall> call = handle.calls_.back();
  handle.calls_.pop_back();
  handle.ranges_.pop_back();
  handle.indices_.pop_back();
  Result<Message> ack = call->Wait(timeout);
  if (!ack.ok()) {
    return ack.status().WithContext(fmt::format(
        "the lead range [{}, {}) of a sync k-of-n push (which step the "
        "gradient joins)",
        layout_.range(lead_).begin, layout_.range(lead_).end));
  }
  RETURN_IF_ERROR(TakeLeadAck(handle, std::move(*ack)));
  for (int r : handle.before_lead_) SendTagged(handle, grads, pull, r, r + 1);
  handle.before_lead_.clear();
  return Status::Ok();
}

Status PsClient::TakeLeadAck(PushHandle& handle, Message ack) {
  if (!(ack.header.flags & kAckDropped)) {
    if (ack.payloads.empty() ||
        ack.payloads[0].size() < sizeof(handle.lead_step_size_)) {
      return Status::DataLoss("leader ack from node {} carries no step size",
                              ack.header.sender);
    }
    std::memcpy(&handle.lead_step_size_, ack.payloads[0].data(),
                sizeof(handle.lead_step_size_));
  }
  handle.lead_ack_ = std::make_unique<Message>(std::move(ack));
  return Status::Ok();
}

void PsClient::SendTagged(PushHandle& handle, const float* grads,
                          uint32_t flags, int first, int last) {
  if (handle.lead_ack_->header.flags & kAckDropped) return;  // nowhere
  // Tagged with the lead's step: its version after the step, minus one.
  const std::vector<int64_t> step(static_cast<size_t>(layout_.num_ranges()),
                                  handle.lead_ack_->header.clock - 1);
  SendRanges(handle, grads, step, kPushTagged | flags, first, last,
             &handle.lead_step_size_, handle.keep_alive_);
}

std::unique_ptr<PushHandle> PsClient::PushInitial(
    const float* params, std::shared_ptr<void> keep_alive) {
  return SendPush(params, {}, kPushInit, keep_alive);
}

std::unique_ptr<PushHandle> PsClient::Leave() {
  return SendToEveryRange(kPushDone);
}

std::unique_ptr<PushHandle> PsClient::Rejoin() {
  return SendToEveryRange(kPushRejoin);
}

std::unique_ptr<PushHandle> PsClient::SendToEveryRange(uint32_t flags) {
  auto handle = std::make_unique<PushHandle>();
  for (int s = 0; s < layout_.num_ranges(); ++s) {
    Message m;
    m.header.type = MessageType::kPush;
    m.header.flags = flags;
    m.header.key_begin = layout_.range(s).begin;
    m.header.key_end = layout_.range(s).end;
    handle->calls_.push_back(rpc_.Request(servers_[s], std::move(m)));
    handle->indices_.push_back(s);
  }
  return handle;
}

std::unique_ptr<PullHandle> PsClient::Pull(
    float* dest, const std::vector<int64_t>& min_versions) {
  auto handle = std::make_unique<PullHandle>();
  handle->dest_ = dest;
  handle->client_ = this;
  for (int s = 0; s < layout_.num_ranges(); ++s) {
    const KeyRange& r = layout_.range(s);
    Message m;
    m.header.type = MessageType::kPullRequest;
    m.header.key_begin = r.begin;
    m.header.key_end = r.end;
    m.header.clock = min_versions.empty() ? 0 : min_versions[s];
    handle->ranges_.push_back(r);
    std::shared_ptr<PayloadPlacement> placement;
    if (compress_pulls_) {
      // A difference to decode comes back (protocol.h, kPullDelta).
      m.header.flags = kPullDelta | CodecFlag(compression_);
      m.payloads.push_back(Buffer::CopyOf(&mirrors_[static_cast<size_t>(s)].seq,
                                          sizeof(int64_t)));
    } else {
      placement = std::make_shared<PayloadPlacement>(
          0, reinterpret_cast<uint8_t*>(dest + r.begin),
          sizeof(float) * static_cast<uint64_t>(r.size()));
      handle->placements_.push_back(placement);
    }
    const InlineSendScope fan_out(
        InlineOnlyAtLastNode(s, layout_.num_ranges()));
    handle->calls_.push_back(
        rpc_.Request(servers_[s], std::move(m), std::move(placement)));
  }
  return handle;
}

namespace {

// Copies a received range into place, piece by piece, skipping the pieces
// that were received in place already (their bytes are at `to`).
void CopyRange(const Buffer& payload, uint8_t* to) {
  payload.ForEachPiece([&](size_t offset, const uint8_t* data, size_t size) {
    if (data != to + offset) std::memcpy(to + offset, data, size);
  });
}

}  // namespace

Result<uint64_t> PsClient::TakeParameters(size_t s, const Message& reply,
                                          size_t first, float* dest) {
  const KeyRange& r = layout_.range(static_cast<int>(s));
  const size_t n = static_cast<size_t>(r.size());
  const size_t bytes = sizeof(float) * n;
  const bool delta = compress_pulls_ && (reply.header.flags & kPullDelta);
  const size_t want = delta ? CompressedBytes(compression_, n) : bytes;
  const size_t payloads = first + (compress_pulls_ ? 2 : 1);
  if (reply.payloads.size() != payloads ||
      reply.payloads[first].size() != want ||
      (compress_pulls_ &&
       reply.payloads[first + 1].size() != 2 * sizeof(int64_t))) {
    return Status::DataLoss(
        "{} from node {} for [{}, {}) has {} payload(s) of {} bytes; "
        "expected {} payload(s), the range taking {} bytes{}",
        MessageTypeName(reply.header.type), reply.header.sender, r.begin, r.end,
        reply.payloads.size(), reply.payload_bytes(), payloads, want,
        delta ? fmt::format(" (a {} difference)", CompressionName(compression_))
              : "");
  }
  uint8_t* to = reinterpret_cast<uint8_t*>(dest + r.begin);
  if (!compress_pulls_) {
    // Received in place (ZeroMQ), or straight from the frames the reply
    // arrived in (one copy).
    CopyRange(reply.payloads[first], to);
    return bytes;
  }
  int64_t seqs[2];
  std::memcpy(seqs, reply.payloads[first + 1].data(), sizeof(seqs));
  PullMirror& m = mirrors_[s];
  if (delta) {
    if (seqs[0] != m.seq || m.values.size() != n) {
      return Status::DataLoss(
          "compressed pull reply from node {} for [{}, {}) is a difference "
          "to copy {}; this worker holds copy {}",
          reply.header.sender, r.begin, r.end, seqs[0], m.seq);
    }
    m.decoded.resize(n);
    Decode(compression_, reply.payloads[first].data(), n, m.decoded.data());
    for (size_t i = 0; i < n; ++i) m.values[i] += m.decoded[i];
  } else {
    m.values.resize(n);
    CopyRange(reply.payloads[first],
              reinterpret_cast<uint8_t*>(m.values.data()));
  }
  m.seq = seqs[1];
  std::memcpy(to, m.values.data(), bytes);
  return reply.payloads[first].size();
}

namespace {

// An applied push's ack: payload 0 = step size, staleness (protocol.h).
void NoteStaleness(const Message& ack, PushResult* result) {
  if (ack.payloads.empty() || ack.payloads[0].size() < 2 * sizeof(int64_t))
    return;
  int64_t info[2];
  std::memcpy(info, ack.payloads[0].data(), sizeof(info));
  result->staleness = std::max(result->staleness, info[1]);
}

// After this, nothing writes into the handle's destination (a transport's
// write still under way is waited for, PayloadPlacement::kRevokeWait at
// most); one that has not ended by then is reported.
void RevokeAll(const std::vector<std::shared_ptr<PayloadPlacement>>& all) {
  for (const auto& p : all) {
    if (!p->Revoke()) {
      LogError(
          "a reply still being received into the model's memory ({} bytes) "
          "did not finish within {} ms after its call was given up; that "
          "memory may still be written",
          p->size(), PayloadPlacement::kRevokeWait.count());
    }
  }
}

}  // namespace

PushHandle::~PushHandle() { RevokeAll(placements_); }

PullHandle::~PullHandle() { RevokeAll(placements_); }

Result<PushResult> PushHandle::Wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  PushResult result;
  // The ranges may have been sent in any order (PushRange); the versions
  // are reported in range order.
  std::vector<std::pair<int, int64_t>> versions;
  if (leader_first_) {
    // Leader-first: the leader's ack says which step (and how many
    // gradients) this gradient is in; Wait() sends it to the other ranges.
    const int lead = client_->lead_;
    ASSIGN_OR_RETURN(Message ack, calls_[0]->Wait(timeout));
    calls_.erase(calls_.begin());
    ranges_.erase(ranges_.begin());
    indices_.erase(indices_.begin());
    RETURN_IF_ERROR(client_->TakeLeadAck(*this, std::move(ack)));
    const uint32_t pull = dest_ != nullptr ? kPushPull : 0;
    client_->SendTagged(*this, grads_, pull, 0, lead);
    client_->SendTagged(*this, grads_, pull, lead + 1,
                        client_->layout_.num_ranges());
  } else if (!before_lead_.empty()) {
    return Status::FailedPrecondition(
        "{} range(s) of a sync k-of-n push wait for the lead range {}, which "
        "was never pushed",
        before_lead_.size(), client_->lead_);
  }
  if (lead_ack_ != nullptr) {
    const Message& ack = *lead_ack_;
    if (ack.header.flags & kAckDropped) {
      // Late: dropped by the lead, sent nowhere else, no parameters.
      result.versions.assign(static_cast<size_t>(client_->layout_.num_ranges()),
                             ack.header.clock);
      result.dropped_ranges = client_->layout_.num_ranges();
      result.bytes = bytes_;
      return result;
    }
    versions.emplace_back(client_->lead_, ack.header.clock);
    NoteStaleness(ack, &result);
    if (dest_ != nullptr) {
      ASSIGN_OR_RETURN(const uint64_t got,
                       client_->TakeParameters(
                           static_cast<size_t>(client_->lead_), ack, 1, dest_));
      result.pulled_bytes += got;
    }
  }
  result.bytes = bytes_;
  for (size_t i = 0; i < calls_.size(); ++i) RETURN_IF_ERROR(Take(i, deadline));
  result.dropped_ranges += got_.dropped_ranges;
  result.pulled_bytes += got_.pulled_bytes;
  result.staleness = std::max(result.staleness, got_.staleness);
  versions.insert(versions.end(), got_versions_.begin(), got_versions_.end());
  std::sort(versions.begin(), versions.end());
  for (const auto& [index, version] : versions)
    result.versions.push_back(version);
  return result;
}

Status PushHandle::WaitFor(size_t ranges, std::chrono::milliseconds timeout) {
  STRATA_CHECK(!leader_first_ && lead_ack_ == nullptr);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  size_t found = 0;
  for (size_t i = 0; i < calls_.size(); ++i) {
    if (static_cast<size_t>(indices_[i]) >= ranges) continue;
    ++found;
    RETURN_IF_ERROR(Take(i, deadline));
  }
  if (found <
      std::min(ranges, static_cast<size_t>(client_->layout_.num_ranges()))) {
    return Status::FailedPrecondition(
        "waiting for the first {} range(s) of a push, of which {} were sent",
        ranges, found);
  }
  return Status::Ok();
}

Status PushHandle::Take(size_t i,
                        std::chrono::steady_clock::time_point deadline) {
  if (taken_.size() < calls_.size()) taken_.resize(calls_.size(), false);
  if (taken_[i]) return Status::Ok();
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  ASSIGN_OR_RETURN(Message ack, calls_[i]->Wait(std::max(
                                    left, std::chrono::milliseconds(0))));
  got_versions_.emplace_back(indices_[i], ack.header.clock);
  const bool dropped = ack.header.flags & kAckDropped;
  if (dropped) ++got_.dropped_ranges;
  NoteStaleness(ack, &got_);
  // A gradient dropped as late (sync k-of-n) brings no parameters.
  if (dest_ != nullptr && !dropped) {
    // Payload 0 is the step size; the parameters follow (protocol.h).
    ASSIGN_OR_RETURN(const uint64_t got,
                     client_->TakeParameters(static_cast<size_t>(indices_[i]),
                                             ack, 1, dest_));
    got_.pulled_bytes += got;
  }
  taken_[i] = true;
  return Status::Ok();
}

Status PullHandle::WaitFor(size_t ranges, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  // A wait that timed out part way resumes where it stopped: the replies
  // already copied are not waited for (nor consumed) twice.
  for (; next_ < std::min(ranges, calls_.size()); ++next_) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    ASSIGN_OR_RETURN(Message reply, calls_[next_]->Wait(std::max(
                                        left, std::chrono::milliseconds(0))));
    ASSIGN_OR_RETURN(const uint64_t got,
                     client_->TakeParameters(next_, reply, 0, dest_));
    pulled_.versions.push_back(reply.header.clock);
    pulled_.bytes += got;
  }
  return Status::Ok();
}

Result<PullHandle::Pulled> PullHandle::Wait(std::chrono::milliseconds timeout) {
  RETURN_IF_ERROR(WaitFor(calls_.size(), timeout));
  return pulled_;
}

}  // namespace strata
