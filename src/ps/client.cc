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
                   std::vector<NodeId> servers, bool leader_first)
    : rpc_(rpc),
      layout_(std::move(layout)),
      servers_(std::move(servers)),
      leader_first_(leader_first && servers_.size() > 1),
      push_pool_(BufferPool::Create(OnePushOfCapacity(layout_))) {
  STRATA_CHECK(static_cast<int>(servers_.size()) == layout_.num_servers());
}

std::unique_ptr<PushHandle> PsClient::SendPush(
    const float* values, const std::vector<int64_t>& versions, uint32_t flags) {
  auto handle = std::make_unique<PushHandle>();
  SendRanges(*handle, values, versions, flags, 0, layout_.num_servers(),
             nullptr);
  return handle;
}

void PsClient::SendRanges(PushHandle& handle, const float* values,
                          const std::vector<int64_t>& versions, uint32_t flags,
                          int first, int last, const int64_t* step_size) {
  for (int s = first; s < last; ++s) {
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
    if (step_size != nullptr) {
      m.payloads.push_back(Buffer::CopyOf(step_size, sizeof(int64_t)));
    }
    handle.bytes_ += sizeof(float) * r.size();
    handle.calls_.push_back(rpc_.Request(servers_[s], std::move(m)));
  }
}

std::unique_ptr<PushHandle> PsClient::Push(
    const float* grads, const std::vector<int64_t>& base_versions) {
  STRATA_CHECK(static_cast<int>(base_versions.size()) == layout_.num_servers());
  if (!leader_first_) return SendPush(grads, base_versions, 0);
  // Phase one: the leader alone; Wait() sends the rest, tagged.
  auto handle = std::make_unique<PushHandle>();
  SendRanges(*handle, grads, base_versions, 0, 0, 1, nullptr);
  handle->client_ = this;
  handle->grads_ = grads;
  return handle;
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
  if (client_ != nullptr) {
    // Leader-first: the leader's ack says which step (and how many
    // gradients) this gradient is in; a dropped one goes nowhere else.
    ASSIGN_OR_RETURN(Message ack, calls_[0]->Wait(timeout));
    const int n = client_->layout_.num_servers();
    if (ack.header.flags & kAckDropped) {
      result.versions.assign(n, ack.header.clock);
      result.dropped_ranges = n;
      result.bytes = bytes_;
      return result;
    }
    int64_t size = 0;
    if (ack.payloads.size() != 1 || ack.payloads[0].size() != sizeof(size)) {
      return Status::DataLoss("leader ack from node {} carries no step size",
                              ack.header.sender);
    }
    std::memcpy(&size, ack.payloads[0].data(), sizeof(size));
    std::vector<int64_t> step(n, ack.header.clock - 1);
    client_->SendRanges(*this, grads_, step, kPushTagged, 1, n, &size);
    result.versions.push_back(ack.header.clock);
    calls_.erase(calls_.begin());
  }
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
    if (reply.payloads.size() != 1 ||
        reply.payloads[0].size() !=
            sizeof(float) * static_cast<size_t>(r.size())) {
      return Status::DataLoss(
          "pull reply from node {} for [{}, {}) has {} bytes, expected {}",
          reply.header.sender, r.begin, r.end, reply.payload_bytes(),
          sizeof(float) * r.size());
    }
    std::memcpy(dest_ + r.begin, reply.payloads[0].data(),
                reply.payloads[0].size());
    pulled.versions.push_back(reply.header.clock);
    pulled.bytes += reply.payloads[0].size();
  }
  return pulled;
}

}  // namespace strata
