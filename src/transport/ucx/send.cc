// Sends of a UcxTransport: each message is one active message (the wire
// header as its header, the payloads as its data, sent from their buffers
// without a copy), behind a back-pressure limit on the bytes in flight.

#include <cstring>
#include <random>

#include "common/log.h"
#include "transport/ucx/transport_impl.h"

namespace strata::ucx {
namespace {

// Errors that say the peer cannot be reached any more (it closed, died or
// stopped answering), as opposed to a fault on this side.
bool PeerGone(ucs_status_t s) {
  return s == UCS_ERR_ENDPOINT_TIMEOUT || s == UCS_ERR_CONNECTION_RESET ||
         s == UCS_ERR_UNREACHABLE || s == UCS_ERR_NOT_CONNECTED ||
         s == UCS_ERR_REJECTED || s == UCS_ERR_CANCELED;
}

// The data of a send as UCX takes it. One piece goes as a contiguous
// buffer: UCX's zero-copy rendezvous takes those, while an I/O vector may
// be staged through copies.
void DescribeData(SendContext& ctx, ucp_request_param_t* p, const void** buffer,
                  size_t* count) {
  if (ctx.iov.size() == 1) {
    p->datatype = ucp_dt_make_contig(1);
    *buffer = ctx.iov[0].buffer;
    *count = ctx.iov[0].length;
    return;
  }
  // No payload bytes: an empty contiguous buffer (UCX wants a non-null I/O
  // vector).
  p->datatype = ctx.iov.empty() ? ucp_dt_make_contig(1) : ucp_dt_make_iov();
  *buffer = ctx.iov.empty() ? nullptr : ctx.iov.data();
  *count = ctx.iov.size();
}

}  // namespace

Status UcxTransport::Send(NodeId to, Message msg) {
  if (Status s = ValidateOutgoing(msg, options_.limits); !s.ok())
    return s.WithContext(fmt::format("node {} -> {}", id_, to));
  ASSIGN_OR_RETURN(std::shared_ptr<Route> route, RouteTo(to));
  msg.header.sender = id_;
  msg.header.receiver = to;
  auto ctx = std::make_unique<SendContext>();
  std::vector<uint64_t> sizes;
  for (const Buffer& p : msg.payloads) sizes.push_back(p.size());
  const Buffer wire_header = wire::EncodeHeader(msg.header, sizes, 0);
  ctx->header = Buffer::Allocate(sizeof(Prefix) + wire_header.size());
  std::memcpy(ctx->header.data() + sizeof(Prefix), wire_header.data(),
              wire_header.size());
  if (ctx->header.size() > max_am_header_) {
    return Status::InvalidArgument(
        "node {} -> {}: {} payloads make a {}-byte header; UCX takes at "
        "most {} bytes",
        id_, to, msg.payloads.size(), ctx->header.size(), max_am_header_);
  }
  const uint64_t bytes = msg.payload_bytes();
  ctx->payloads = std::move(msg.payloads);
  for (const Buffer& p : ctx->payloads) {
    p.ForEachPiece([&](size_t, const uint8_t* data, size_t size) {
      if (size > 0) ctx->iov.push_back({const_cast<uint8_t*>(data), size});
    });
  }
  ctx->transport = this;
  ctx->bytes = bytes;
  // Shared: Close() waits for sends inside UCX before it takes the
  // worker away.
  ReaderMutexLock alive(&life_mu_);
  if (closed_.load())
    return Status::Cancelled("node {}: transport is closed", id_);
  RETURN_IF_ERROR(StartSend(to, route, std::move(ctx)));
  messages_sent_.fetch_add(1, std::memory_order_relaxed);
  bytes_sent_.fetch_add(bytes, std::memory_order_relaxed);
  return Status::Ok();
}

Status UcxTransport::SendRaw(NodeId to, std::vector<uint8_t> am_header,
                             std::vector<uint8_t> data) {
  ASSIGN_OR_RETURN(std::shared_ptr<Route> route, RouteTo(to));
  auto ctx = std::make_unique<SendContext>();
  ctx->transport = this;
  ctx->header = Buffer::CopyOf(am_header.data(), am_header.size());
  if (!data.empty()) {
    ctx->payloads.push_back(Buffer::CopyOf(data.data(), data.size()));
    ctx->iov.push_back({ctx->payloads[0].data(), data.size()});
  }
  ReaderMutexLock alive(&life_mu_);
  if (closed_.load())
    return Status::Cancelled("node {}: transport is closed", id_);
  return StartSend(to, route, std::move(ctx), /*raw=*/true);
}

// Hands `ctx` to UCX on `route` (to node `to`). `raw`: the header is sent
// as given (SendRawUcxForTesting), with no stream prefix written into it.
// kUnavailable when the route is lost or was replaced, kDeadlineExceeded
// when the sends still in flight stay above UcxOptions::max_inflight_bytes
// for the send timeout (a stalled peer).
Status UcxTransport::StartSend(NodeId to, const std::shared_ptr<Route>& route,
                               std::unique_ptr<SendContext> ctx, bool raw) {
  if (route->failed.load()) return Lost(to, *route, "reported it lost");
  // A send from the progress thread itself (a reply made in the
  // direct-delivery sink) does not wait for room: only that thread makes
  // room. Nor does it signal it: it drives UCX again right after.
  const bool on_progress = OnProgressThread();
  if (!on_progress) RETURN_IF_ERROR(WaitForRoom(to, *route, ctx->bytes));
  MutexLock lock(&route->mu);
  RETURN_IF_ERROR(CheckRoute(to, *route));
  if (!raw) {
    const Prefix prefix{route->stream, route->next_seq};
    std::memcpy(ctx->header.data(), &prefix, sizeof(prefix));
  }
  return Submit(to, *route, std::move(ctx), raw, on_progress);
}

bool UcxTransport::HasRoom(uint64_t bytes) const {
  return closed_.load() || inflight_bytes_ == 0 ||
         inflight_bytes_ + bytes <= options_.max_inflight_bytes;
}

// Back-pressure: waits while the sends in flight hold too many bytes.
Status UcxTransport::WaitForRoom(NodeId to, const Route& route,
                                 uint64_t bytes) {
  MutexLock lock(&inflight_mu_);
  const auto deadline = Clock::now() + options_.send_timeout;
  bool room = HasRoom(bytes);
  while (!room) {
    const bool signalled = inflight_cv_.WaitUntil(deadline);
    room = HasRoom(bytes);
    if (!signalled) break;
  }
  if (closed_.load())
    return Status::Cancelled("node {}: transport is closed", id_);
  if (!room) {
    return Status::DeadlineExceeded(
        "node {} -> {}: {} bytes still in flight after {} ms (peer at {} "
        "takes nothing)",
        id_, to, inflight_bytes_, options_.send_timeout.count(),
        route.endpoint);
  }
  return Status::Ok();
}

// OK when `route` has an endpoint that is set up and still its peer's.
Status UcxTransport::CheckRoute(NodeId to, Route& route) {
  const auto replaced = [&] {
    return Status::Unavailable(
        "node {}: the route to node {} at {} was replaced or disconnected", id_,
        to, route.endpoint);
  };
  if (route.retired) return replaced();
  if (route.failed.load() || !EnsureEp(route))
    return Lost(to, route, "reported it lost");
  if (route.wireup != nullptr) {
    if (!AwaitWireup(route))
      return Lost(to, route, "the connection was not set up");
    if (route.retired || route.ep == nullptr) return replaced();
  }
  return Status::Ok();
}

Status UcxTransport::Submit(NodeId to, Route& route,
                            std::unique_ptr<SendContext> ctx, bool raw,
                            bool on_progress) {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                   UCP_OP_ATTR_FIELD_DATATYPE;
  p.cb.send = &UcxTransport::OnSent;
  p.user_data = ctx.get();
  const void* buffer = nullptr;
  size_t count = 0;
  DescribeData(*ctx, &p, &buffer, &count);
  // Counted before the call: its completion may run before it returns.
  const uint64_t bytes = ctx->bytes;
  {
    MutexLock g(&inflight_mu_);
    inflight_bytes_ += bytes;
    ++inflight_sends_;
  }
  ucs_status_ptr_t r = ucp_am_send_nbx(route.ep, kAmId, ctx->header.data(),
                                       ctx->header.size(), buffer, count, &p);
  if (UCS_PTR_IS_ERR(r)) {
    ReleaseInflight(bytes);
    const ucs_status_t why = UCS_PTR_STATUS(r);
    if (PeerGone(why)) {
      // The send found the peer lost before UCX's error callback did
      // (seen under load): the same error as after the callback.
      route.reported_lost = true;
      route.failed = true;
      return Lost(to, route, UcsError(why));
    }
    return Status::Unavailable("node {}: sending to node {} at {}: {}", id_, to,
                               route.endpoint, UcsError(why));
  }
  if (!raw) ++route.next_seq;  // taken only by a message that went out
  if (r == nullptr) {
    ReleaseInflight(bytes);
    return Status::Ok();
  }
  (void)ctx.release();  // OnSent frees it
  // Not done at once (a rendezvous, or queued): the progress thread must
  // drive it.
  if (!on_progress) ucp_worker_signal(worker_);
  return Status::Ok();
}

Status UcxTransport::Lost(NodeId to, const Route& route,
                          const std::string& why) const {
  return Status::Unavailable("node {}: node {} at {} is unreachable (UCX: {})",
                             id_, to, route.endpoint, why);
}

void UcxTransport::ReleaseInflight(uint64_t bytes) {
  {
    MutexLock g(&inflight_mu_);
    inflight_bytes_ -= bytes;
    --inflight_sends_;
  }
  inflight_cv_.SignalAll();
}

int64_t UcxTransport::SendsInFlight() {
  MutexLock g(&inflight_mu_);
  return inflight_sends_;
}

void UcxTransport::OnSent(void* request, ucs_status_t status, void* user) {
  auto* ctx = static_cast<SendContext*>(user);
  UcxTransport* self = ctx->transport;
  self->ReleaseInflight(ctx->bytes);
  if (status != UCS_OK) {
    LogWarning("node {}: a send ended with {}", self->id_, UcsError(status));
    self->dropped_.fetch_add(1, std::memory_order_relaxed);
  }
  delete ctx;
  ucp_request_free(request);
}

uint32_t UcxTransport::NewStreamId() {
  static std::atomic<uint32_t> counter{0};
  static const uint32_t base = std::random_device{}();
  return base + 0x9e3779b9u * ++counter;
}

}  // namespace strata::ucx
