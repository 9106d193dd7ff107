#include "transport/zmq/transport.h"

#include <malloc.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "common/log.h"
#include "common/mutex.h"
#include "transport/buffer.h"
#include "transport/wire.h"
#include "transport/zmq/zap_handler.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Below this size a frame is copied into a ZeroMQ message: cheaper than the
// bookkeeping of a zero-copy message.
constexpr size_t kZeroCopySendMinBytes = 16 * 1024;
// Blocking ZeroMQ calls wait in slices of this length so that Close() is
// noticed promptly by threads inside Recv() or Send().
constexpr milliseconds kWaitSlice{100};
constexpr auto kSweepInterval = std::chrono::seconds(1);
// Segments drained per wakeup before the deadline is checked again.
constexpr int kDrainBatch = 64;

bool StartsWith(const std::string& s, const char* prefix) {
  return s.rfind(prefix, 0) == 0;
}

bool IsZmqEndpoint(const std::string& endpoint) {
  return (StartsWith(endpoint, "tcp://") && endpoint.size() > 6) ||
         (StartsWith(endpoint, "ipc://") && endpoint.size() > 6);
}

std::string Hex(const void* data, size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < size && i < 16; ++i) {
    out.push_back(kDigits[p[i] >> 4]);
    out.push_back(kDigits[p[i] & 15]);
  }
  return out;
}

int ClampMs(milliseconds d) {
  return static_cast<int>(std::clamp<int64_t>(d.count(), 0, 1 << 30));
}

Status FromZmqError(const zmq::error_t& e, const std::string& what) {
  switch (e.num()) {
    case ETERM:
      return Status::Cancelled("{}: ZeroMQ context terminated", what);
    case EINVAL:
    case EPROTONOSUPPORT:
    case ENOCOMPATPROTO:
      return Status::InvalidArgument("{}: {}", what, e.what());
    case EADDRINUSE:
    case EADDRNOTAVAIL:
    case ENODEV:
      return Status::Unavailable("{}: {}", what, e.what());
    default:
      return Status::IoError("{}: {}", what, e.what());
  }
}

void FreeOwner(void* /*data*/, void* hint) {
  delete static_cast<std::shared_ptr<void>*>(hint);
}

// Turns an outgoing frame into a ZeroMQ message; large frames are not copied:
// ZeroMQ holds a reference to the payload until the bytes are on the wire.
zmq::message_t ToZmq(Buffer frame) {
  if (frame.empty()) return zmq::message_t();
  if (frame.size() < kZeroCopySendMinBytes) {
    return zmq::message_t(frame.data(), frame.size());
  }
  uint8_t* data = frame.data();
  const size_t size = frame.size();
  auto* hint = new std::shared_ptr<void>(std::move(frame).Release());
  try {
    return zmq::message_t(data, size, &FreeOwner, hint);
  } catch (...) {
    delete hint;
    throw;
  }
}

// Wraps a received ZeroMQ frame without copying it.
Buffer FromZmq(zmq::message_t&& msg) {
  if (msg.size() == 0) return Buffer();
  auto holder = std::make_shared<zmq::message_t>(std::move(msg));
  return Buffer::Adopt(holder->data(), holder->size(), holder);
}

// One outgoing route.
struct Peer {
  Peer(std::string endpoint, std::unique_ptr<zmq::socket_t> socket)
      : endpoint(std::move(endpoint)), socket(std::move(socket)) {}
  const std::string endpoint;
  Mutex mu;
  std::unique_ptr<zmq::socket_t> socket GUARDED_BY(mu);  // null once closed
  uint32_t next_transfer GUARDED_BY(mu) = 1;
};

// The receiving side of a ZmqTransport (its ROUTER socket and what
// reassembles the messages read from it) belongs to one thread at a time:
// whoever holds this lease (Recv, Bind, Close). A capability, so that the
// fields it guards are checked like a mutex's; a flag under a mutex rather
// than a timed mutex, so that waiting for it is bounded and sanitizers
// understand it.
class CAPABILITY("receiving side") ReceiverLease {
 public:
  // Waits as long as it takes (the holder lets go within one wait slice
  // once the transport is closed, or at its own deadline).
  void Acquire() ACQUIRE() {
    MutexLock lock(&mu_);
    while (leased_) free_.Wait();
    leased_ = true;
  }
  // Gives up at `deadline`, returning false.
  bool AcquireBefore(Clock::time_point deadline) TRY_ACQUIRE(true) {
    MutexLock lock(&mu_);
    while (leased_) {
      if (!free_.WaitUntil(deadline)) break;
    }
    if (leased_) return false;
    leased_ = true;
    return true;
  }
  void Release() RELEASE() {
    {
      MutexLock lock(&mu_);
      leased_ = false;
    }
    free_.Signal();
  }

 private:
  Mutex mu_;
  CondVar free_{&mu_};
  bool leased_ GUARDED_BY(mu_) = false;
};

// Holds a ReceiverLease for its scope (Acquire() / Release()).
class SCOPED_CAPABILITY HoldReceiver {
 public:
  explicit HoldReceiver(ReceiverLease* lease) ACQUIRE(lease) : lease_(lease) {
    lease_->Acquire();
  }
  ~HoldReceiver() RELEASE() { lease_->Release(); }
  HoldReceiver(const HoldReceiver&) = delete;
  HoldReceiver& operator=(const HoldReceiver&) = delete;

 private:
  ReceiverLease* const lease_;
};

class ZmqTransport final : public Transport {
 public:
  ZmqTransport(NodeId id, ZmqOptions options, std::shared_ptr<ZmqContext> ctx)
      : id_(id),
        options_(std::move(options)),
        ctx_(std::move(ctx)),
        pool_(BufferPool::Create(options_.receive_pool_bytes)),
        wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

  ~ZmqTransport() override {
    Close();
    if (wake_fd_ >= 0) ::close(wake_fd_);
  }

  void SetPlacement(PlacementLookup lookup) override EXCLUDES(placement_mu_) {
    MutexLock lock(&placement_mu_);
    placement_ = std::move(lookup);
  }

  void Interrupt() override {
    if (wake_fd_ < 0) return;
    const uint64_t one = 1;
    // Fails only when the counter is saturated: already signalled.
    (void)!::write(wake_fd_, &one, sizeof(one));
  }

  NodeId node_id() const override { return id_; }

  Status Bind(const std::string& requested) override {
    if (!IsZmqEndpoint(requested)) {
      return Status::InvalidArgument(
          "node {}: cannot bind '{}': want tcp://HOST:PORT or ipc://PATH", id_,
          requested);
    }
    std::string endpoint = requested;
    // ZeroMQ spells "any port" as '*'; accept the socket-API spelling too.
    if (StartsWith(endpoint, "tcp://") && endpoint.size() > 2 &&
        endpoint.compare(endpoint.size() - 2, 2, ":0") == 0) {
      endpoint.replace(endpoint.size() - 1, 1, "*");
    }
    HoldReceiver hold(&receiver_);
    if (closed_.load()) {
      return Status::Cancelled("node {}: transport is closed", id_);
    }
    if (router_) {
      return Status::FailedPrecondition("node {}: already bound to {}", id_,
                                        this->endpoint());
    }
    std::string zap_domain;
    if (options_.curve) {
      // The ZAP handler must be in place before the CURVE server binds:
      // without one, ZeroMQ admits any client that knows the server key.
      Result<ZapHandler*> zap = ctx_->zap();
      if (!zap.ok())
        return zap.status().WithContext(fmt::format("node {}", id_));
      ASSIGN_OR_RETURN(
          zap_domain,
          (*zap)->Register(options_.curve->allowed_client_keys,
                           fmt::format("node {}", id_), zap_refused_));
      zap_ = *zap;
    }
    try {
      std::unique_ptr<zmq::socket_t> monitor;
      std::unique_ptr<zmq::socket_t> router = MakeRouter(zap_domain, &monitor);
      router->bind(endpoint);
      std::string bound = router->get(zmq::sockopt::last_endpoint);
      const std::string wildcard = "tcp://0.0.0.0:";
      if (!options_.advertise_host.empty() &&
          bound.compare(0, wildcard.size(), wildcard) == 0) {
        bound = "tcp://" + options_.advertise_host + ":" +
                bound.substr(wildcard.size());
      }
      router_ = std::move(router);
      monitor_ = std::move(monitor);
      zap_domain_ = zap_domain;
      MutexLock state_lock(&state_mu_);
      endpoint_ = std::move(bound);
    } catch (const zmq::error_t& e) {
      if (zap_ != nullptr) zap_->Unregister(zap_domain);
      return FromZmqError(e, fmt::format("node {}: bind {}", id_, requested));
    }
    return Status::Ok();
  }

  std::string endpoint() const override EXCLUDES(state_mu_) {
    MutexLock lock(&state_mu_);
    return endpoint_;
  }

  Status Connect(NodeId peer, const std::string& endpoint) override {
    if (peer < 0) {
      return Status::InvalidArgument("node {}: cannot connect to node id {}",
                                     id_, peer);
    }
    if (!IsZmqEndpoint(endpoint) || endpoint.find('*') != std::string::npos) {
      return Status::InvalidArgument(
          "node {}: cannot connect node {} to '{}': want tcp://HOST:PORT or "
          "ipc://PATH",
          id_, peer, endpoint);
    }
    std::shared_ptr<Peer> route;
    std::shared_ptr<Peer> old;
    {
      MutexLock lock(&peers_mu_);
      if (closed_.load()) {
        return Status::Cancelled("node {}: transport is closed", id_);
      }
      auto it = peers_.find(peer);
      if (it != peers_.end() && it->second->endpoint == endpoint) {
        return Status::Ok();
      }
      try {
        route = std::make_shared<Peer>(endpoint, MakeDealer(endpoint));
      } catch (const zmq::error_t& e) {
        return FromZmqError(e, fmt::format("node {}: connect to node {} at {}",
                                           id_, peer, endpoint));
      }
      if (it != peers_.end()) old = std::move(it->second);
      peers_[peer] = std::move(route);
    }
    // Outside peers_mu_: a send in progress on the old route may hold its
    // lock for up to one wait slice.
    if (old) CloseRoute(*old);
    return Status::Ok();
  }

  Status Disconnect(NodeId peer) override {
    std::shared_ptr<Peer> old;
    {
      MutexLock lock(&peers_mu_);
      auto it = peers_.find(peer);
      if (it == peers_.end()) {
        return Status::NotFound("node {}: no route to node {}", id_, peer);
      }
      old = std::move(it->second);
      peers_.erase(it);
    }
    CloseRoute(*old);
    return Status::Ok();
  }

  Status Send(NodeId to, Message msg) override {
    if (Status s = ValidateOutgoing(msg, options_.limits); !s.ok()) {
      return s.WithContext(fmt::format("node {} -> {}", id_, to));
    }
    std::shared_ptr<Peer> peer;
    {
      MutexLock lock(&peers_mu_);
      if (closed_.load()) {
        return Status::Cancelled("node {}: transport is closed", id_);
      }
      auto it = peers_.find(to);
      if (it == peers_.end()) {
        return Status::NotFound(
            "node {} has no route to node {}; Connect() first", id_, to);
      }
      peer = it->second;
    }
    msg.header.sender = id_;
    msg.header.receiver = to;
    const MessageType type = msg.header.type;
    const uint64_t bytes = msg.payload_bytes();

    MutexLock lock(&peer->mu);
    if (!peer->socket) {
      return Status::Unavailable("node {}: route to node {} at {} was closed",
                                 id_, to, peer->endpoint);
    }
    const uint32_t transfer = peer->next_transfer++;
    RETURN_IF_ERROR(SendSegments(
        to, *peer, type,
        wire::EncodeSegments(std::move(msg), transfer, options_.frame_bytes)));
    messages_sent_.fetch_add(1, std::memory_order_relaxed);
    bytes_sent_.fetch_add(bytes, std::memory_order_relaxed);
    return Status::Ok();
  }

  Result<Message> Recv(milliseconds timeout) override {
    const Clock::time_point deadline =
        Clock::now() + std::max(timeout, milliseconds(0));
    if (!receiver_.AcquireBefore(deadline)) {
      return Status::DeadlineExceeded(
          "node {}: no message at {} within {} ms (another Recv() held the "
          "receiver)",
          id_, endpoint(), timeout.count());
    }
    Result<Message> result = ReceiveHeld(deadline, timeout);
    receiver_.Release();
    return result;
  }

  void Close() override {
    if (closed_.exchange(true)) return;
    Interrupt();  // a Recv() in progress lets go at once
    {
      // Recv() notices closed_ within one wait slice and lets go.
      HoldReceiver hold(&receiver_);
      if (monitor_) {
        zmq_socket_monitor(router_->handle(), nullptr, 0);
        monitor_.reset();
      }
      router_.reset();
      conns_.clear();
      if (zap_ != nullptr) zap_->Unregister(zap_domain_);
    }
    std::map<NodeId, std::shared_ptr<Peer>> peers;
    {
      MutexLock lock(&peers_mu_);
      peers.swap(peers_);
    }
    for (auto& [id, peer] : peers) CloseRoute(*peer);
  }

  TransportStats stats() const override {
    TransportStats s;
    s.messages_sent = messages_sent_.load(std::memory_order_relaxed);
    s.messages_received = messages_received_.load(std::memory_order_relaxed);
    s.payload_bytes_sent = bytes_sent_.load(std::memory_order_relaxed);
    s.payload_bytes_received = bytes_received_.load(std::memory_order_relaxed);
    s.messages_dropped = dropped_.load(std::memory_order_relaxed);
    s.connections_refused = zap_refused_->load(std::memory_order_acquire) +
                            handshakes_failed_.load(std::memory_order_acquire);
    return s;
  }

 private:
  // Per incoming connection (ROUTER routing id) reassembly state.
  struct Conn {
    explicit Conn(wire::MessageAssembler a) : assembler(std::move(a)) {}
    wire::MessageAssembler assembler;
    Clock::time_point last_activity;
  };

  // Hands the segments of one message to the peer's socket, each frame
  // waiting (in slices) only while the peer's queue is full, up to the send
  // timeout. A failure in the middle of a segment resets the route.
  Status SendSegments(NodeId to, Peer& peer, MessageType type,
                      std::vector<wire::Segment> segments) REQUIRES(peer.mu) {
    const Clock::time_point deadline = Clock::now() + options_.send_timeout;
    bool mid_segment = false;
    try {
      for (size_t s = 0; s < segments.size(); ++s) {
        wire::Segment& segment = segments[s];
        for (size_t f = 0; f < segment.size(); ++f) {
          const bool more = f + 1 < segment.size();
          zmq::message_t part = ToZmq(std::move(segment[f]));
          while (!peer.socket->send(
              part, more ? zmq::send_flags::sndmore : zmq::send_flags::none)) {
            if (closed_.load()) {
              if (mid_segment) ResetRoute(peer);
              return Status::Cancelled(
                  "node {}: closed while sending to node {}", id_, to);
            }
            if (Clock::now() >= deadline) {
              if (mid_segment) ResetRoute(peer);
              return Status::DeadlineExceeded(
                  "node {}: {} message to node {} at {} stalled: segment {} "
                  "of {} not accepted within {} ms (peer slow, down or not "
                  "started?)",
                  id_, MessageTypeName(type), to, peer.endpoint, s + 1,
                  segments.size(), options_.send_timeout.count());
            }
          }
          mid_segment = more;
        }
      }
    } catch (const zmq::error_t& e) {
      if (mid_segment) ResetRoute(peer);
      return FromZmqError(e, fmt::format("node {}: send {} message to node {}",
                                         id_, MessageTypeName(type), to));
    }
    return Status::Ok();
  }

  // Recv() with the receiving side held: reads segments until one
  // completes a message, the deadline passes, or Interrupt() or Close()
  // wakes it.
  Result<Message> ReceiveHeld(Clock::time_point deadline, milliseconds timeout)
      REQUIRES(receiver_) {
    if (closed_.load()) {
      return Status::Cancelled("node {}: transport is closed", id_);
    }
    if (!router_) {
      return Status::FailedPrecondition("node {}: Recv() before Bind()", id_);
    }
    try {
      while (true) {
        if (std::optional<Message> msg = TakeSegments()) {
          return std::move(*msg);
        }
        const Clock::time_point now = Clock::now();
        if (now - last_sweep_ >= kSweepInterval) SweepStale(now);
        if (closed_.load()) {
          return Status::Cancelled("node {}: closed while receiving", id_);
        }
        if (now >= deadline) {
          const size_t partial = PartialCount();
          return Status::DeadlineExceeded(
              "node {}: no message arrived at {} within {} ms{}", id_,
              endpoint(), timeout.count(),
              partial == 0
                  ? std::string()
                  : fmt::format(" ({} message(s) partly received)", partial));
        }
        ASSIGN_OR_RETURN(
            const bool interrupted,
            PollOnce(std::chrono::ceil<milliseconds>(deadline - now)));
        if (!interrupted) continue;
        if (closed_.load()) {
          return Status::Cancelled("node {}: closed while receiving", id_);
        }
        return Status::DeadlineExceeded(
            "node {}: receive at {} interrupted (Interrupt())", id_,
            endpoint());
      }
    } catch (const zmq::error_t& e) {
      return FromZmqError(e, fmt::format("node {}: receive", id_));
    }
  }

  // Reads up to kDrainBatch waiting segments; the message one of them
  // completed, if any (counted as received).
  std::optional<Message> TakeSegments() REQUIRES(receiver_) {
    for (int i = 0; i < kDrainBatch; ++i) {
      bool got = false;
      std::optional<Message> msg = ReceiveSegment(&got);
      if (msg) {
        messages_received_.fetch_add(1, std::memory_order_relaxed);
        bytes_received_.fetch_add(msg->payload_bytes(),
                                  std::memory_order_relaxed);
        return msg;
      }
      if (!got) break;
    }
    return std::nullopt;
  }

  // Waits up to `left` (at most one wait slice) for the router to become
  // readable; handles handshake events meanwhile. True when Interrupt()
  // (or Close()) woke it.
  Result<bool> PollOnce(milliseconds left) REQUIRES(receiver_) {
    // The router, then the wake-up descriptor (none if the system gave
    // none) and the handshake monitor (only with CURVE).
    zmq_pollitem_t items[3] = {{router_->handle(), 0, ZMQ_POLLIN, 0}};
    int n_items = 1;
    const int wake_at = wake_fd_ >= 0 ? n_items++ : -1;
    if (wake_at >= 0) items[wake_at] = {nullptr, wake_fd_, ZMQ_POLLIN, 0};
    const int monitor_at = monitor_ ? n_items++ : -1;
    if (monitor_at >= 0) {
      items[monitor_at] = {monitor_->handle(), 0, ZMQ_POLLIN, 0};
    }
    if (zmq_poll(items, n_items, std::min(left, kWaitSlice).count()) < 0) {
      if (zmq_errno() == ETERM) {
        return Status::Cancelled("node {}: ZeroMQ context terminated", id_);
      }
      if (zmq_errno() != EINTR) {
        return Status::IoError("node {}: poll: {}", id_,
                               zmq_strerror(zmq_errno()));
      }
    }
    if (monitor_at >= 0 && (items[monitor_at].revents & ZMQ_POLLIN)) {
      DrainMonitor();
    }
    if (wake_at >= 0 && (items[wake_at].revents & ZMQ_POLLIN)) {
      uint64_t count = 0;
      (void)!::read(wake_fd_, &count, sizeof(count));  // reset
      return true;
    }
    return false;
  }

  // The ROUTER this node receives on, not bound yet: a CURVE server in
  // `zap_domain` (with its handshake monitor in *monitor) when the options
  // say so. Throws zmq::error_t.
  std::unique_ptr<zmq::socket_t> MakeRouter(
      const std::string& zap_domain, std::unique_ptr<zmq::socket_t>* monitor) {
    auto router = std::make_unique<zmq::socket_t>(ctx_->context(),
                                                  zmq::socket_type::router);
    router->set(zmq::sockopt::linger, 0);
    if (options_.curve) {
      router->set(zmq::sockopt::curve_server, true);
      router->set(zmq::sockopt::curve_secretkey,
                  options_.curve->own.secret_key);
      router->set(zmq::sockopt::zap_domain, zap_domain);
      *monitor = MonitorHandshakes(*router, zap_domain);
    }
    router->set(zmq::sockopt::rcvhwm, options_.recv_hwm);
    router->set(zmq::sockopt::maxmsgsize,
                static_cast<int64_t>(options_.max_frame_bytes));
    if (options_.socket_buffer_bytes > 0) {
      router->set(zmq::sockopt::rcvbuf, options_.socket_buffer_bytes);
      router->set(zmq::sockopt::sndbuf, options_.socket_buffer_bytes);
    }
    return router;
  }

  // A DEALER connected to `endpoint`, a CURVE client when the options say
  // so. Throws zmq::error_t.
  std::unique_ptr<zmq::socket_t> MakeDealer(const std::string& endpoint) {
    auto s = std::make_unique<zmq::socket_t>(ctx_->context(),
                                             zmq::socket_type::dealer);
    s->set(zmq::sockopt::linger, ClampMs(options_.linger));
    s->set(zmq::sockopt::sndhwm, options_.send_hwm);
    s->set(zmq::sockopt::sndtimeo,
           ClampMs(std::min(options_.send_timeout, kWaitSlice)));
    if (options_.socket_buffer_bytes > 0) {
      s->set(zmq::sockopt::sndbuf, options_.socket_buffer_bytes);
      s->set(zmq::sockopt::rcvbuf, options_.socket_buffer_bytes);
    }
    if (options_.curve) {
      s->set(zmq::sockopt::curve_serverkey, options_.curve->server_public_key);
      s->set(zmq::sockopt::curve_publickey, options_.curve->own.public_key);
      s->set(zmq::sockopt::curve_secretkey, options_.curve->own.secret_key);
    }
    s->connect(endpoint);
    return s;
  }

  static void CloseRoute(Peer& peer) EXCLUDES(peer.mu) {
    MutexLock lock(&peer.mu);
    peer.socket.reset();
  }

  // After a failure in the middle of a multipart segment the socket would
  // glue the next message onto the unfinished one: start a fresh socket
  // (the receiver drops the fragment).
  void ResetRoute(Peer& peer) REQUIRES(peer.mu) {
    peer.socket.reset();
    try {
      peer.socket = MakeDealer(peer.endpoint);
    } catch (const zmq::error_t& e) {
      LogWarning("node {}: cannot reopen route to {}: {}", id_, peer.endpoint,
                 e.what());
    }
  }

  // Reads one segment if one is waiting (*got = true) and feeds it to its
  // connection's assembler. Returns the message it completed, if any. Bad
  // input is dropped here.
  std::optional<Message> ReceiveSegment(bool* got) REQUIRES(receiver_) {
    zmq::message_t routing_id;
    if (!router_->recv(routing_id, zmq::recv_flags::dontwait)) return {};
    *got = true;
    std::string from(routing_id.data<char>(), routing_id.size());
    // The rest of a multipart message is already here (ZeroMQ delivers
    // multipart messages atomically), so these reads do not wait.
    frames_.clear();
    const size_t max_frames = size_t{options_.limits.max_payloads} + 1;
    bool too_many = false;
    bool more = routing_id.more();
    while (more) {
      zmq::message_t part;
      if (!router_->recv(part, zmq::recv_flags::none)) break;
      more = part.more();
      if (frames_.size() < max_frames) {
        frames_.push_back(FromZmq(std::move(part)));
      } else {
        too_many = true;
      }
    }

    const Clock::time_point now = Clock::now();
    auto it = conns_.find(from);
    if (it == conns_.end()) {
      wire::MessageAssembler::Options opts;
      opts.limits = options_.limits;
      opts.expected_receiver = id_;
      opts.pool = pool_;
      opts.placement = [this](const MessageHeader& header) {
        PlacementLookup lookup;
        {
          MutexLock lock(&placement_mu_);
          lookup = placement_;
        }
        return lookup ? lookup(header) : nullptr;
      };
      it = conns_.emplace(from, Conn(wire::MessageAssembler(std::move(opts))))
               .first;
    }
    Conn& conn = it->second;
    conn.last_activity = now;
    if (too_many) {
      conn.assembler.Reset();
      Drop(Status::DataLoss("segment of more than {} frames", max_frames),
           from);
      return {};
    }
    Status abandoned;
    Result<std::optional<Message>> result = Status::Internal("not run");
    try {
      result = conn.assembler.Add(&frames_, &abandoned);
    } catch (const std::bad_alloc&) {
      conn.assembler.Reset();
      result = Status::DataLoss("out of memory while assembling a message");
    }
    if (!abandoned.ok()) Drop(abandoned, from);
    if (!result.ok()) {
      Drop(result.status(), from);
      return {};
    }
    return std::move(result).value();
  }

  // Makes `router` report failed handshakes to a PAIR socket, returned.
  // ZeroMQ refuses peers without keys or with another server key before
  // asking the ZAP handler; this is where they are seen. Throws
  // zmq::error_t.
  std::unique_ptr<zmq::socket_t> MonitorHandshakes(zmq::socket_t& router,
                                                   const std::string& tag) {
    const std::string address = "inproc://strata-handshakes-" + tag;
    if (zmq_socket_monitor(router.handle(), address.c_str(),
                           ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) != 0) {
      throw zmq::error_t();
    }
    auto pair = std::make_unique<zmq::socket_t>(ctx_->context(),
                                                zmq::socket_type::pair);
    pair->set(zmq::sockopt::linger, 0);
    pair->connect(address);
    return pair;
  }

  // Counts and logs the failed handshakes the monitor reported.
  void DrainMonitor() REQUIRES(receiver_) {
    while (true) {
      zmq::message_t event, address;
      if (!monitor_->recv(event, zmq::recv_flags::dontwait)) return;
      if (event.more()) (void)monitor_->recv(address, zmq::recv_flags::none);
      if (event.size() < 6) continue;
      uint16_t kind = 0;
      uint32_t value = 0;
      std::memcpy(&kind, event.data(), sizeof(kind));
      std::memcpy(&value, event.data<char>() + 2, sizeof(value));
      std::string why;
      if (kind == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL &&
          value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) {
        why = "the peer has no CURVE keys (cluster.security = \"none\"?)";
      } else if (kind == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL &&
                 value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC) {
        why =
            "the peer's CURVE handshake does not decrypt (it holds another "
            "cluster's keys)";
      } else if (kind == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
        why = fmt::format("protocol error 0x{:x} in the handshake", value);
      } else {
        // Typically a peer without keys that saw the CURVE greeting and hung
        // up before this side noticed the mismatch.
        why = fmt::format(
            "the handshake broke off ({}): the peer has no CURVE keys or "
            "gave up on them",
            zmq_strerror(static_cast<int>(value)));
      }
      // Counted after it is logged (only this monitor thread counts), so
      // whoever sees the count finds the log line written.
      const uint64_t n = handshakes_failed_.load(std::memory_order_relaxed) + 1;
      // The first few and then every power of two: a peer retrying every
      // 100 ms must not flood the log.
      if (n <= 3 || (n & (n - 1)) == 0) {
        LogWarning("node {}: refused a connection at {}: {} ({} so far)", id_,
                   endpoint(), why, n);
      }
      handshakes_failed_.fetch_add(1, std::memory_order_release);
    }
  }

  void Drop(const Status& why, const std::string& from) {
    const uint64_t n = dropped_.fetch_add(1, std::memory_order_relaxed) + 1;
    // Log the first few and then every power of two, so that a stream of
    // garbage cannot flood the log.
    if (n <= 10 || (n & (n - 1)) == 0) {
      LogWarning(
          "node {}: dropped input from connection {} ({} dropped so "
          "far): {}",
          id_, Hex(from.data(), from.size()), n, why.ToString());
    }
  }

  void SweepStale(Clock::time_point now) REQUIRES(receiver_) {
    last_sweep_ = now;
    for (auto it = conns_.begin(); it != conns_.end();) {
      const auto idle = now - it->second.last_activity;
      if (idle < options_.stale_message_timeout) {
        ++it;
        continue;
      }
      if (it->second.assembler.in_progress()) {
        Drop(Status::DataLoss(
                 "message abandoned after {} of {} bytes: no segment for {} "
                 "ms",
                 it->second.assembler.pending_received(),
                 it->second.assembler.pending_expected(),
                 std::chrono::duration_cast<milliseconds>(idle).count()),
             it->first);
      }
      it = conns_.erase(it);
    }
  }

  size_t PartialCount() const REQUIRES(receiver_) {
    size_t n = 0;
    for (const auto& [id, conn] : conns_) n += conn.assembler.in_progress();
    return n;
  }

  const NodeId id_;
  const ZmqOptions options_;
  const std::shared_ptr<ZmqContext> ctx_;  // Outlives every socket below.
  const std::shared_ptr<BufferPool> pool_;
  // Interrupt() makes it readable; Recv() polls it beside the socket. -1 if
  // the system refused one (Interrupt() then does nothing).
  const int wake_fd_;
  std::atomic<bool> closed_{false};

  mutable Mutex state_mu_;
  std::string endpoint_ GUARDED_BY(state_mu_);

  // The receiving side (Recv, Bind, Close hold it).
  ReceiverLease receiver_;
  std::unique_ptr<zmq::socket_t> router_ GUARDED_BY(receiver_);
  // With CURVE: the router's handshake events (a PAIR socket), the ZAP
  // handler it is registered with and its domain there.
  std::unique_ptr<zmq::socket_t> monitor_ GUARDED_BY(receiver_);
  ZapHandler* zap_ GUARDED_BY(receiver_) = nullptr;
  std::string zap_domain_ GUARDED_BY(receiver_);
  std::map<std::string, Conn> conns_ GUARDED_BY(receiver_);
  std::vector<Buffer> frames_ GUARDED_BY(receiver_);
  Clock::time_point last_sweep_ GUARDED_BY(receiver_);

  Mutex peers_mu_;
  std::map<NodeId, std::shared_ptr<Peer>> peers_ GUARDED_BY(peers_mu_);

  Mutex placement_mu_;
  PlacementLookup placement_ GUARDED_BY(placement_mu_);

  std::atomic<uint64_t> messages_sent_{0};
  std::atomic<uint64_t> messages_received_{0};
  std::atomic<uint64_t> bytes_sent_{0};
  std::atomic<uint64_t> bytes_received_{0};
  std::atomic<uint64_t> dropped_{0};
  // Clients the ZAP handler refused (it counts on its own thread) and other
  // failed CURVE handshakes (counted from the monitor in Recv()).
  const std::shared_ptr<std::atomic<uint64_t>> zap_refused_ =
      std::make_shared<std::atomic<uint64_t>>(0);
  std::atomic<uint64_t> handshakes_failed_{0};
};

// ZeroMQ allocates every received frame (up to 1 MiB) with malloc, and the
// receiver keeps frames as payload pieces. With glibc's defaults, frames of
// that size are often mmap'ed, or their heap memory trimmed back to the
// system once freed, so steady traffic pays page faults and page zeroing on
// every message: about 10% of a 64 MiB push here (perf). Once per process,
// keep allocations below 16 MiB in the heap and keep up to 256 MiB of freed
// heap memory for reuse. Blocks of 16 MiB and more are still mmap'ed.
void KeepFrameMemory() {
  static std::once_flag once;
  std::call_once(once, [] {
    mallopt(M_MMAP_THRESHOLD, 16 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
  });
}

}  // namespace

ZmqContext::ZmqContext(std::unique_ptr<zmq::context_t> context, int io_threads)
    : context_(std::move(context)), io_threads_(io_threads) {}

ZmqContext::~ZmqContext() = default;

Result<ZapHandler*> ZmqContext::zap() {
  MutexLock lock(&zap_mu_);
  if (!zap_) {
    ASSIGN_OR_RETURN(zap_, ZapHandler::Start(*context_));
  }
  return zap_.get();
}

Result<std::shared_ptr<ZmqContext>> ZmqContext::Create(int io_threads) {
  if (io_threads < 1) {
    return Status::InvalidArgument(
        "ZeroMQ context needs >= 1 I/O thread, got {}", io_threads);
  }
  KeepFrameMemory();
  try {
    auto context = std::make_unique<zmq::context_t>(io_threads);
    return std::shared_ptr<ZmqContext>(
        new ZmqContext(std::move(context), io_threads));
  } catch (const zmq::error_t& e) {
    return Status::Internal("cannot create a ZeroMQ context: {}", e.what());
  }
}

Result<std::unique_ptr<Transport>> NewZmqTransport(NodeId id,
                                                   ZmqOptions options) {
  if (id < 0) {
    return Status::InvalidArgument(
        "ZeroMQ transport for node id {}: ids are >= 0", id);
  }
  if (options.frame_bytes == 0 ||
      options.frame_bytes > options.max_frame_bytes) {
    return Status::InvalidArgument(
        "ZeroMQ transport for node {}: frame_bytes {} must be in [1, "
        "max_frame_bytes = {}]",
        id, options.frame_bytes, options.max_frame_bytes);
  }
  if (options.max_frame_bytes <
      wire::EncodedHeaderBytes(options.limits.max_payloads)) {
    return Status::InvalidArgument(
        "ZeroMQ transport for node {}: max_frame_bytes {} cannot hold a header "
        "of {} payloads",
        id, options.max_frame_bytes, options.limits.max_payloads);
  }
  if (options.send_hwm < 0 || options.recv_hwm < 0 ||
      options.send_timeout.count() < 0 || options.linger.count() < 0 ||
      options.socket_buffer_bytes < 0) {
    return Status::InvalidArgument(
        "ZeroMQ transport for node {}: negative hwm, timeout, linger or socket "
        "buffer size",
        id);
  }
  if (options.curve) {
    Status keys = CheckCurveKeys(*options.curve);
    if (!keys.ok()) {
      return keys.WithContext(fmt::format("ZeroMQ transport for node {}", id));
    }
  }
  std::shared_ptr<ZmqContext> ctx = options.context;
  if (!ctx) {
    ASSIGN_OR_RETURN(ctx, ZmqContext::Create(options.io_threads));
  }
  return std::unique_ptr<Transport>(
      std::make_unique<ZmqTransport>(id, std::move(options), std::move(ctx)));
}

bool SplitTcpEndpoint(const std::string& endpoint, std::string* host,
                      std::string* port) {
  const std::string prefix = "tcp://";
  const size_t colon = endpoint.rfind(':');
  if (endpoint.compare(0, prefix.size(), prefix) != 0 ||
      colon == std::string::npos || colon < prefix.size()) {
    return false;
  }
  *host = endpoint.substr(prefix.size(), colon - prefix.size());
  *port = endpoint.substr(colon + 1);
  return !host->empty() && !port->empty();
}

bool IsWildcardHost(const std::string& host) {
  return host == "*" || host == "0.0.0.0";
}

}  // namespace strata
