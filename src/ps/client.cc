#include "ps/client.h"

#include <cstring>

#include "ps/protocol.h"

namespace strata {
namespace {

// The pool's capacity class for `bytes` (0 below the pool's minimum: such
// small copies come from the heap).
size_t PoolCapacity(size_t bytes) {
  if (bytes < BufferPool::kMinCapacity) return 0;
  size_t capacity = BufferPool::kMinCapacity;
  while (capacity < bytes) capacity *= 2;
  return capacity;
}

size_t OnePushOfCapacity(const KeyLayout& layout) {
  size_t total = 0;
  for (const KeyRange& r : layout.ranges()) {
    total += PoolCapacity(sizeof(float) * static_cast<size_t>(r.size()));
  }
  return total;
}

}  // namespace

PsClient::PsClient(RpcEndpoint& rpc, KeyLayout layout,
                   std::vector<NodeId> servers)
    : rpc_(rpc),
      layout_(std::move(layout)),
      servers_(std::move(servers)),
      push_pool_(BufferPool::Create(OnePushOfCapacity(layout_))) {
  STRATA_CHECK(static_cast<int>(servers_.size()) == layout_.num_servers());
}

std::unique_ptr<PushHandle> PsClient::SendPush(
    const float* values, const std::vector<int64_t>& versions, uint32_t flags) {
  auto handle = std::make_unique<PushHandle>();
  for (int s = 0; s < layout_.num_servers(); ++s) {
    const KeyRange& r = layout_.range(s);
    Message m;
    m.header.type = MessageType::kPush;
    m.header.flags = flags;
    m.header.key_begin = r.begin;
    m.header.key_end = r.end;
    m.header.clock = versions.empty() ? 0 : versions[s];
    const size_t bytes = sizeof(float) * static_cast<size_t>(r.size());
    if (bytes >= BufferPool::kMinCapacity) {
      Buffer copy = push_pool_->Acquire(bytes);
      std::memcpy(copy.data(), values + r.begin, bytes);
      m.payloads.push_back(std::move(copy));
    } else {
      m.payloads.push_back(Buffer::CopyOf(values + r.begin, bytes));
    }
    handle->bytes_ += sizeof(float) * r.size();
    handle->calls_.push_back(rpc_.Request(servers_[s], std::move(m)));
  }
  return handle;
}

std::unique_ptr<PushHandle> PsClient::Push(
    const float* grads, const std::vector<int64_t>& base_versions) {
  STRATA_CHECK(static_cast<int>(base_versions.size()) == layout_.num_servers());
  return SendPush(grads, base_versions, 0);
}

std::unique_ptr<PushHandle> PsClient::PushInitial(const float* params) {
  return SendPush(params, {}, kPushInit);
}

std::unique_ptr<PushHandle> PsClient::Leave() {
  auto handle = std::make_unique<PushHandle>();
  for (int s = 0; s < layout_.num_servers(); ++s) {
    Message m;
    m.header.type = MessageType::kPush;
    m.header.flags = kPushDone;
    m.header.key_begin = layout_.range(s).begin;
    m.header.key_end = layout_.range(s).end;
    handle->calls_.push_back(rpc_.Request(servers_[s], std::move(m)));
  }
  return handle;
}

std::unique_ptr<PullHandle> PsClient::Pull(
    float* dest, const std::vector<int64_t>& min_versions) {
  auto handle = std::make_unique<PullHandle>();
  handle->dest_ = dest;
  for (int s = 0; s < layout_.num_servers(); ++s) {
    const KeyRange& r = layout_.range(s);
    Message m;
    m.header.type = MessageType::kPullRequest;
    m.header.key_begin = r.begin;
    m.header.key_end = r.end;
    m.header.clock = min_versions.empty() ? 0 : min_versions[s];
    handle->ranges_.push_back(r);
    handle->calls_.push_back(rpc_.Request(servers_[s], std::move(m)));
  }
  return handle;
}

Result<PushResult> PushHandle::Wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  PushResult result;
  result.bytes = bytes_;
  for (auto& call : calls_) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    ASSIGN_OR_RETURN(Message ack,
                     call->Wait(std::max(left, std::chrono::milliseconds(0))));
    result.versions.push_back(ack.header.clock);
    if (ack.header.flags & kAckDropped) ++result.dropped_ranges;
  }
  return result;
}

Result<PullHandle::Pulled> PullHandle::Wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  Pulled pulled;
  for (size_t i = 0; i < calls_.size(); ++i) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    ASSIGN_OR_RETURN(Message reply, calls_[i]->Wait(std::max(
                                        left, std::chrono::milliseconds(0))));
    const KeyRange& r = ranges_[i];
    const size_t expected = sizeof(float) * static_cast<size_t>(r.size());
    if (reply.payload_bytes() != expected) {
      return Status::DataLoss(
          "pull reply from node {} for [{}, {}) has {} bytes, expected {}",
          reply.header.sender, r.begin, r.end, reply.payload_bytes(),
          expected);
    }
    // The range may come in several chunks (protocol.h); they are its bytes
    // in order.
    auto* out = reinterpret_cast<uint8_t*>(dest_ + r.begin);
    for (const Buffer& chunk : reply.payloads) {
      if (!chunk.empty()) std::memcpy(out, chunk.data(), chunk.size());
      out += chunk.size();
    }
    pulled.versions.push_back(reply.header.clock);
    pulled.bytes += expected;
  }
  return pulled;
}

}  // namespace strata
