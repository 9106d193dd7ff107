// Receives of a UcxTransport: an arriving active message is validated,
// its data taken (copied now, or fetched by rendezvous into fresh aligned
// buffers or a caller's placement), and the finished messages handed to
// the direct-delivery sink or Recv() in each sender's stream order.

#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "transport/ucx/transport_impl.h"

namespace strata::ucx {
namespace {

using std::chrono::milliseconds;

constexpr size_t kAlign = 64;  // each received payload starts aligned
// How long later messages of a stream wait for a missing one.
constexpr milliseconds kGapTimeout{5000};
// A stream idle this long is forgotten (looked at every kPruneEvery); a
// cluster's routes carry heartbeats every 0.5 s.
constexpr milliseconds kIdleStream{60000};
constexpr milliseconds kPruneEvery{10000};

// A stream is one sender's route: (sender, stream id).
uint64_t StreamKey(const wire::DecodedHeader& decoded, const Prefix& prefix) {
  return (static_cast<uint64_t>(decoded.header.sender) << 32) | prefix.stream;
}

// An eager message's data, copied from UCX's buffer to where each payload
// goes (`where`; payload `placed` through its placement).
void CopyEager(const void* data, const std::vector<uint64_t>& sizes,
               PayloadPlacement* place, size_t placed,
               const std::vector<uint8_t*>& where, Message& msg) {
  const uint8_t* from = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < sizes.size(); ++i) {
    const size_t size = sizes[i];
    if (i == placed) {
      // Revoked meanwhile: that payload is delivered empty.
      if (!place->Write(0, from, size)) msg.payloads[i] = Buffer();
    } else if (size > 0) {
      std::memcpy(where[i], from, size);
    }
    from += size;
  }
}

}  // namespace

ucs_status_t UcxTransport::OnMessage(void* arg, const void* header,
                                     size_t header_length, void* data,
                                     size_t length,
                                     const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxTransport*>(arg);
  const bool rndv = param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV;
  return self->Receive(header, header_length, data, length, rndv);
}

// An active message: validate its header, then take its data (copied now,
// or by rendezvous into fresh aligned buffers).
ucs_status_t UcxTransport::Receive(const void* header, size_t header_length,
                                   void* data, size_t length, bool rndv) {
  Prefix prefix{};
  if (header_length < sizeof(prefix)) {
    LogWarning("node {}: dropped a UCX message with a {}-byte header", id_,
               header_length);
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return UCS_OK;
  }
  std::memcpy(&prefix, header, sizeof(prefix));
  const Result<wire::DecodedHeader> decoded =
      wire::DecodeHeader(static_cast<const uint8_t*>(header) + sizeof(prefix),
                         header_length - sizeof(prefix), options_.limits);
  Stream* stream = nullptr;
  if (Status bad = CheckArrival(prefix, decoded, length, &stream); !bad.ok()) {
    DropArrival(bad, prefix, decoded, stream);
    // A rendezvous refused with an error: the sender's send fails too.
    return rndv ? UCS_ERR_INVALID_PARAM : UCS_OK;
  }
  stream->last_used = Clock::now();
  auto in = std::make_shared<Incoming>();
  in->msg.header = decoded->header;
  const std::vector<uint64_t>& sizes = decoded->payload_sizes;
  // Receive in place (placement.h): the payload a caller asked for goes
  // straight into its memory. A rendezvous writes it later, pinned until
  // then; one revoked already is received as usual.
  std::shared_ptr<PayloadPlacement> place = PlacementFor(decoded->header);
  if (place && !place->Fits(sizes)) place = nullptr;
  if (place && rndv && !place->Pin()) place = nullptr;
  const size_t placed = place ? place->payload_index() : sizes.size();
  std::vector<uint8_t*> where;
  std::vector<ucp_dt_iov_t> iov = LayOut(sizes, place, placed, *in, &where);
  stream->waiting[prefix.seq] = in;
  if (!rndv) {
    CopyEager(data, sizes, place.get(), placed, where, in->msg);
    in->done = true;
    return UCS_OK;
  }
  StartRendezvous(data, in, std::move(iov), std::move(place), placed);
  return UCS_OK;
}

// OK for a message this node takes, with *stream its sender's stream;
// kDataLoss saying what is wrong otherwise (*stream set once the header
// named a sender and was meant for this node).
Status UcxTransport::CheckArrival(const Prefix& prefix,
                                  const Result<wire::DecodedHeader>& decoded,
                                  size_t length, Stream** stream) {
  if (!decoded.ok()) return decoded.status();
  if (decoded->payload_bytes != length) {
    return Status::DataLoss("header declares {} payload bytes, {} arrived",
                            decoded->payload_bytes, length);
  }
  if (decoded->header.receiver != id_) {
    return Status::DataLoss("addressed to node {}", decoded->header.receiver);
  }
  Stream& s = streams_[StreamKey(*decoded, prefix)];
  *stream = &s;
  if (prefix.seq < s.next || s.waiting.count(prefix.seq) > 0) {
    return Status::DataLoss(
        "message {} of a stream from node {} came again or after the "
        "stream went on without it",
        prefix.seq, decoded->header.sender);
  }
  return Status::Ok();
}

void UcxTransport::DropArrival(const Status& why, const Prefix& prefix,
                               const Result<wire::DecodedHeader>& decoded,
                               const Stream* stream) {
  LogWarning("node {}: dropped a UCX message: {}", id_, why.message());
  dropped_.fetch_add(1, std::memory_order_relaxed);
  // A message from a known sender keeps its place in its stream, so the
  // later ones do not wait for it.
  if (decoded.ok() && stream == nullptr) {
    Stream& st = streams_[StreamKey(*decoded, prefix)];
    if (prefix.seq >= st.next && st.waiting.count(prefix.seq) == 0) {
      auto gap = std::make_shared<Incoming>();
      gap->failed = gap->gap = true;
      st.waiting[prefix.seq] = gap;
    }
  }
}

std::vector<ucp_dt_iov_t> UcxTransport::LayOut(
    const std::vector<uint64_t>& sizes,
    const std::shared_ptr<PayloadPlacement>& place, size_t placed, Incoming& in,
    std::vector<uint8_t*>* where) {
  // The others in one block, each at an aligned offset in it.
  size_t total = 0;
  std::vector<size_t> offsets;
  for (size_t i = 0; i < sizes.size(); ++i) {
    offsets.push_back(total);
    if (i != placed)
      total += (static_cast<size_t>(sizes[i]) + kAlign - 1) / kAlign * kAlign;
  }
  // Large blocks come from a pool: a fresh one would cost page faults
  // and a new UCX memory registration per message.
  auto block = std::make_shared<Buffer>(total >= BufferPool::kMinCapacity
                                            ? pool_->Acquire(total)
                                            : Buffer::Allocate(total));
  std::vector<ucp_dt_iov_t> iov;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const size_t size = sizes[i];
    uint8_t* at = i == placed ? place->dest() : block->data() + offsets[i];
    where->push_back(at);
    if (size == 0) {
      in.msg.payloads.push_back(Buffer());
    } else if (i == placed) {
      in.msg.payloads.push_back(Buffer::Adopt(at, size, place));
    } else {
      in.msg.payloads.push_back(Buffer::Adopt(at, size, block));
    }
    if (size > 0) iov.push_back({at, size});
  }
  return iov;
}

void UcxTransport::StartRendezvous(void* data,
                                   const std::shared_ptr<Incoming>& in,
                                   std::vector<ucp_dt_iov_t> iov,
                                   std::shared_ptr<PayloadPlacement> place,
                                   size_t placed) {
  // The I/O vector stays valid until the receive completes; so does the
  // pin on a placement it writes into.
  auto* rc =
      new RecvContext{in, std::move(iov), std::move(place), this, placed};
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                   UCP_OP_ATTR_FIELD_DATATYPE;
  const bool one = rc->iov.size() == 1;
  p.datatype = one ? ucp_dt_make_contig(1) : ucp_dt_make_iov();
  p.user_data = rc;
  p.cb.recv_am = &UcxTransport::OnRecvData;
  recvs_.insert(rc);
  ucs_status_ptr_t r = ucp_am_recv_data_nbx(
      worker_, data, one ? rc->iov[0].buffer : rc->iov.data(),
      one ? rc->iov[0].length : rc->iov.size(), &p);
  if (r == nullptr || UCS_PTR_IS_ERR(r)) {
    (r == nullptr ? in->done : in->failed) = true;
    EndRecv(rc);
  }
}

void UcxTransport::OnRecvData(void* request, ucs_status_t status,
                              size_t /*length*/, void* user) {
  auto* ctx = static_cast<RecvContext*>(user);
  if (status == UCS_OK) {
    ctx->in->done = true;
  } else {
    LogWarning("UCX: receiving a message's data failed: {}", UcsError(status));
    ctx->in->failed = true;
  }
  ctx->self->EndRecv(ctx);
  ucp_request_free(request);
}

void UcxTransport::EndRecv(RecvContext* rc) {
  recvs_.erase(rc);
  // Revoked while the data came: its owner may reuse the memory as soon
  // as this unpins, so the message must not hold a view of it.
  if (rc->pinned && rc->pinned->Unpin())
    rc->in->msg.payloads[rc->placed] = Buffer();
  delete rc;
}

std::shared_ptr<PayloadPlacement> UcxTransport::PlacementFor(
    const MessageHeader& h) {
  PlacementLookup lookup;
  {
    MutexLock lock(&placement_mu_);
    lookup = placement_;
  }
  return lookup ? lookup(h) : nullptr;
}

void UcxTransport::Deliver() {
  std::vector<Message> out;
  const Clock::time_point now = Clock::now();
  TakeInOrder(now, &out);
  if (now - last_prune_ > kPruneEvery) PruneStreams(now);
  if (!out.empty()) HandOver(std::move(out));
}

// Moves each stream's finished messages, in order, to *out; a message
// missing for kGapTimeout is given up on.
void UcxTransport::TakeInOrder(Clock::time_point now,
                               std::vector<Message>* out) {
  for (auto& [stream, st] : streams_) {
    while (true) {
      auto it = st.waiting.find(st.next);
      if (it == st.waiting.end() && !st.waiting.empty()) {
        // A gap: give the missing message kGapTimeout, then go on.
        if (st.blocked_since == Clock::time_point{}) st.blocked_since = now;
        if (now - st.blocked_since < kGapTimeout) break;
        const uint32_t to = st.waiting.begin()->first;
        LogWarning(
            "node {}: UCX messages {}..{} of a stream never came in {} ms; "
            "going on without them",
            id_, st.next, to - 1, kGapTimeout.count());
        dropped_.fetch_add(to - st.next, std::memory_order_relaxed);
        st.next = to;
        continue;
      }
      st.blocked_since = Clock::time_point{};
      if (it == st.waiting.end() || !(it->second->done || it->second->failed))
        break;
      if (it->second->done) {
        out->push_back(std::move(it->second->msg));
      } else if (!it->second->gap) {
        dropped_.fetch_add(1, std::memory_order_relaxed);  // data lost
      }
      st.waiting.erase(it);
      ++st.next;
    }
  }
}

// Forgets the streams of routes that went away (a peer replaced or
// reconnected).
void UcxTransport::PruneStreams(Clock::time_point now) {
  last_prune_ = now;
  for (auto it = streams_.begin(); it != streams_.end();) {
    if (it->second.waiting.empty() &&
        now - it->second.last_used > kIdleStream) {
      it = streams_.erase(it);
    } else {
      ++it;
    }
  }
}

// Direct delivery (SetDirectDelivery): offered in order, until the sink
// declines one; that one and every later message are queued, and nothing
// is offered while the queue holds any, so that no message overtakes one
// that Recv() has still to return.
void UcxTransport::HandOver(std::vector<Message> out) {
  size_t taken = 0;
  {
    MutexLock sink_lock(&sink_mu_);
    bool queue_empty = false;
    if (sink_) {
      MutexLock lock(&rx_mu_);
      queue_empty = ready_.empty();
    }
    for (; queue_empty && taken < out.size(); ++taken) {
      const uint64_t bytes = out[taken].payload_bytes();
      if (!sink_(out[taken])) break;
      CountReceived(bytes);
    }
  }
  if (taken == out.size()) return;
  MutexLock lock(&rx_mu_);
  for (size_t i = taken; i < out.size(); ++i)
    ready_.push_back(std::move(out[i]));
  rx_cv_.SignalAll();
}

void UcxTransport::CountReceived(uint64_t payload_bytes) {
  messages_received_.fetch_add(1, std::memory_order_relaxed);
  bytes_received_.fetch_add(payload_bytes, std::memory_order_relaxed);
}

Result<Message> UcxTransport::Recv(milliseconds timeout) {
  const auto deadline = Clock::now() + std::max(timeout, milliseconds(0));
  MutexLock lock(&rx_mu_);
  if (closed_.load())
    return Status::Cancelled("node {}: transport is closed", id_);
  if (endpoint().empty())
    return Status::FailedPrecondition("node {}: Recv() before Bind()", id_);
  while (true) {
    if (closed_.load())
      return Status::Cancelled("node {}: closed while receiving", id_);
    if (!ready_.empty()) {
      Message m = std::move(ready_.front());
      ready_.pop_front();
      CountReceived(m.payload_bytes());
      return m;
    }
    if (interrupted_) {
      interrupted_ = false;
      return Status::DeadlineExceeded(
          "node {}: receive at {} interrupted (Interrupt())", id_, endpoint());
    }
    if (Clock::now() >= deadline || !rx_cv_.WaitUntil(deadline)) {
      if (!ready_.empty() || closed_.load() || interrupted_) continue;
      return Status::DeadlineExceeded(
          "node {}: no message arrived at {} within {} ms", id_, endpoint(),
          timeout.count());
    }
  }
}

// The sink runs on the progress thread (Deliver()): a message it takes
// costs no wake-up of another thread, and a request handled in it
// (RpcEndpoint::SetInlineHandling) is answered from the thread that drives
// UCX, which then sends the reply on without being signalled.
bool UcxTransport::SetDirectDelivery(std::function<bool(Message&)> sink) {
  MutexLock lock(&sink_mu_);
  sink_ = std::move(sink);
  return true;
}

void UcxTransport::SetPlacement(PlacementLookup lookup) {
  MutexLock lock(&placement_mu_);
  placement_ = std::move(lookup);
}

void UcxTransport::Interrupt() {
  MutexLock lock(&rx_mu_);
  interrupted_ = true;
  rx_cv_.SignalAll();
}

}  // namespace strata::ucx
