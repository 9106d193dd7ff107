#include "transport/inproc/transport.h"

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <utility>

#include "common/log.h"
#include "common/mutex.h"

namespace strata {
namespace internal {

// The receiver's fast path (Transport::SetDirectDelivery): senders call `fn`
// under a shared lock; replacing it takes the lock exclusively.
struct DirectSink {
  SharedMutex mu;
  std::function<bool(Message&)> fn GUARDED_BY(mu);
};

// One endpoint's queue of messages.
struct Inbox {
  explicit Inbox(std::string endpoint) : endpoint(std::move(endpoint)) {}
  const std::string endpoint;
  Mutex mu;
  CondVar not_empty{&mu};
  CondVar not_full{&mu};
  // Set at Bind(), under mu; senders read it under mu.
  std::shared_ptr<DirectSink> sink GUARDED_BY(mu);
  std::deque<Message> queue GUARDED_BY(mu);
  bool bound GUARDED_BY(mu) = false;
  bool closed GUARDED_BY(mu) = false;
};

// Endpoint name -> inbox. An inbox exists from the first Bind() or Connect()
// that names it until its owner closes.
class InProcHub {
 public:
  // The inbox for `endpoint`, created unbound if nobody named it yet.
  std::shared_ptr<Inbox> Lookup(const std::string& endpoint) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    std::shared_ptr<Inbox>& inbox = inboxes_[endpoint];
    if (!inbox) inbox = std::make_shared<Inbox>(endpoint);
    return inbox;
  }

  // The current inbox for `endpoint`, or null if nobody names it now.
  std::shared_ptr<Inbox> Find(const std::string& endpoint) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    auto it = inboxes_.find(endpoint);
    return it == inboxes_.end() ? nullptr : it->second;
  }

  Result<std::shared_ptr<Inbox>> Bind(const std::string& endpoint)
      EXCLUDES(mu_) {
    std::string name = endpoint;
    if (endpoint == "inproc://*") {
      MutexLock lock(&mu_);
      do {
        name = "inproc://auto-" + std::to_string(next_auto_++);
      } while (inboxes_.count(name) > 0);
    }
    std::shared_ptr<Inbox> inbox = Lookup(name);
    MutexLock lock(&inbox->mu);
    if (inbox->bound) {
      return Status::Unavailable("{} is already bound by another node", name);
    }
    inbox->bound = true;
    return inbox;
  }

  // Called by the owner on close; a later Bind() of the name gets a new inbox.
  void Remove(const std::shared_ptr<Inbox>& inbox) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    auto it = inboxes_.find(inbox->endpoint);
    if (it != inboxes_.end() && it->second == inbox) inboxes_.erase(it);
  }

 private:
  Mutex mu_;
  std::map<std::string, std::shared_ptr<Inbox>> inboxes_ GUARDED_BY(mu_);
  uint64_t next_auto_ GUARDED_BY(mu_) = 0;
};

}  // namespace internal

namespace {

using internal::Inbox;
using internal::InProcHub;
using Clock = std::chrono::steady_clock;

constexpr char kScheme[] = "inproc://";

bool IsInProcEndpoint(const std::string& endpoint) {
  return endpoint.rfind(kScheme, 0) == 0 &&
         endpoint.size() > sizeof(kScheme) - 1;
}

class InProcTransport final : public Transport {
 public:
  InProcTransport(NodeId id, InProcOptions options,
                  std::shared_ptr<InProcHub> hub)
      : id_(id), options_(std::move(options)), hub_(std::move(hub)) {}
  ~InProcTransport() override { Close(); }

  NodeId node_id() const override { return id_; }

  Status Bind(const std::string& endpoint) override EXCLUDES(mu_) {
    if (!IsInProcEndpoint(endpoint)) {
      return Status::InvalidArgument(
          "node {}: inproc transport cannot bind '{}' (want inproc://NAME)",
          id_, endpoint);
    }
    MutexLock lock(&mu_);
    if (closed_) return Status::Cancelled("node {}: transport is closed", id_);
    if (inbox_) {
      return Status::FailedPrecondition("node {}: already bound to {}", id_,
                                        inbox_->endpoint);
    }
    ASSIGN_OR_RETURN(inbox_, hub_->Bind(endpoint));
    MutexLock inbox_lock(&inbox_->mu);
    inbox_->sink = direct_;
    return Status::Ok();
  }

  bool DeliversOnSendersThreads() const override { return true; }

  bool SetDirectDelivery(std::function<bool(Message&)> sink) override {
    WriterMutexLock lock(&direct_->mu);
    direct_->fn = std::move(sink);
    return true;
  }

  std::string endpoint() const override EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return inbox_ ? inbox_->endpoint : std::string();
  }

  Status Connect(NodeId peer, const std::string& endpoint) override
      EXCLUDES(mu_) {
    if (peer < 0) {
      return Status::InvalidArgument("node {}: cannot connect to node id {}",
                                     id_, peer);
    }
    if (!IsInProcEndpoint(endpoint) || endpoint == "inproc://*") {
      return Status::InvalidArgument(
          "node {}: '{}' is not an inproc endpoint to connect to", id_,
          endpoint);
    }
    std::shared_ptr<Inbox> inbox = hub_->Lookup(endpoint);
    MutexLock lock(&mu_);
    if (closed_) return Status::Cancelled("node {}: transport is closed", id_);
    routes_[peer] = std::move(inbox);
    return Status::Ok();
  }

  Status Disconnect(NodeId peer) override EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    if (routes_.erase(peer) == 0) {
      return Status::NotFound("node {}: no route to node {}", id_, peer);
    }
    return Status::Ok();
  }

  Status Send(NodeId to, Message msg) override {
    if (Status s = ValidateOutgoing(msg, options_.limits); !s.ok()) {
      return s.WithContext(fmt::format("node {} -> {}", id_, to));
    }
    ASSIGN_OR_RETURN(std::shared_ptr<Inbox> inbox, RouteTo(to));
    msg.header.sender = id_;
    msg.header.receiver = to;
    const uint64_t bytes = msg.payload_bytes();
    if (!OfferDirect(*inbox, msg)) {
      bool closed = false;
      Status queued;
      {
        MutexLock lock(&inbox->mu);
        closed = inbox->closed;
        if (!closed) queued = Enqueue(to, *inbox, std::move(msg));
      }
      if (closed) {
        // The peer may have restarted on the same name: follow it.
        ASSIGN_OR_RETURN(inbox, FollowRestart(to, inbox));
        MutexLock lock(&inbox->mu);
        queued = Enqueue(to, *inbox, std::move(msg));
      }
      RETURN_IF_ERROR(queued);
      inbox->not_empty.Signal();
    }
    messages_sent_.fetch_add(1, std::memory_order_relaxed);
    bytes_sent_.fetch_add(bytes, std::memory_order_relaxed);
    return Status::Ok();
  }

  Result<Message> Recv(std::chrono::milliseconds timeout) override
      EXCLUDES(mu_) {
    std::shared_ptr<Inbox> inbox;
    {
      MutexLock lock(&mu_);
      if (closed_)
        return Status::Cancelled("node {}: transport is closed", id_);
      if (!inbox_) {
        return Status::FailedPrecondition("node {}: Recv() before Bind()", id_);
      }
      inbox = inbox_;
    }
    Message msg;
    {
      MutexLock lock(&inbox->mu);
      const auto deadline = Clock::now() + timeout;
      while (!inbox->closed && inbox->queue.empty()) {
        if (!inbox->not_empty.WaitUntil(deadline)) break;
      }
      if (inbox->closed) {
        return Status::Cancelled("node {}: transport closed while receiving",
                                 id_);
      }
      if (inbox->queue.empty()) {
        return Status::DeadlineExceeded(
            "node {}: no message arrived at {} within {} ms", id_,
            inbox->endpoint, timeout.count());
      }
      msg = std::move(inbox->queue.front());
      inbox->queue.pop_front();
    }
    inbox->not_full.Signal();
    messages_received_.fetch_add(1, std::memory_order_relaxed);
    bytes_received_.fetch_add(msg.payload_bytes(), std::memory_order_relaxed);
    return msg;
  }

  void Close() override EXCLUDES(mu_) {
    std::shared_ptr<Inbox> inbox;
    {
      MutexLock lock(&mu_);
      if (closed_) return;
      closed_ = true;
      inbox = std::move(inbox_);
      routes_.clear();
    }
    if (!inbox) return;
    hub_->Remove(inbox);
    size_t dropped = 0;
    {
      MutexLock lock(&inbox->mu);
      inbox->closed = true;
      dropped = inbox->queue.size();
      inbox->queue.clear();
    }
    inbox->not_empty.SignalAll();
    inbox->not_full.SignalAll();
    if (dropped > 0) {
      LogDebug("node {}: closed {} with {} undelivered messages", id_,
               inbox->endpoint, dropped);
    }
  }

  TransportStats stats() const override {
    TransportStats s;
    s.messages_sent = messages_sent_.load(std::memory_order_relaxed);
    s.messages_received = messages_received_.load(std::memory_order_relaxed);
    s.payload_bytes_sent = bytes_sent_.load(std::memory_order_relaxed);
    s.payload_bytes_received = bytes_received_.load(std::memory_order_relaxed);
    return s;
  }

 private:
  // The inbox of `to`: kCancelled once closed, kNotFound without a route.
  Result<std::shared_ptr<Inbox>> RouteTo(NodeId to) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    if (closed_) return Status::Cancelled("node {}: transport is closed", id_);
    auto it = routes_.find(to);
    if (it == routes_.end()) {
      return Status::NotFound(
          "node {} has no route to node {}; Connect() first", id_, to);
    }
    return it->second;
  }

  // The receiver's fast path: taken on this thread, no queue, no wake-up
  // of its receive thread. Whether the receiver's sink took `msg`.
  static bool OfferDirect(Inbox& inbox, Message& msg) EXCLUDES(inbox.mu) {
    std::shared_ptr<internal::DirectSink> sink;
    {
      MutexLock lock(&inbox.mu);
      if (!inbox.closed) sink = inbox.sink;
    }
    if (!sink) return false;
    ReaderMutexLock lock(&sink->mu);
    return sink->fn && sink->fn(msg);
  }

  // The inbox now bound under the name of `closed` (its node restarted),
  // which becomes the route to `to`; kUnavailable when nobody binds the
  // name now.
  Result<std::shared_ptr<Inbox>> FollowRestart(
      NodeId to, const std::shared_ptr<Inbox>& closed) EXCLUDES(mu_) {
    std::shared_ptr<Inbox> fresh = hub_->Find(closed->endpoint);
    if (!fresh) {
      return Status::Unavailable("node {}: node {} at {} is closed", id_, to,
                                 closed->endpoint);
    }
    MutexLock routes_lock(&mu_);
    auto it = routes_.find(to);
    if (it != routes_.end() && it->second == closed) it->second = fresh;
    return fresh;
  }

  // Queues `msg` in `inbox` once it has room (up to the send timeout); the
  // caller signals not_empty after letting go of the lock. kUnavailable
  // when the inbox is closed, kDeadlineExceeded when it stayed full.
  Status Enqueue(NodeId to, Inbox& inbox, Message msg) REQUIRES(inbox.mu) {
    const MessageType type = msg.header.type;
    const auto deadline = Clock::now() + options_.send_timeout;
    while (!inbox.closed &&
           inbox.queue.size() >= options_.max_queued_messages) {
      if (!inbox.not_full.WaitUntil(deadline)) break;
    }
    if (inbox.closed) {
      return Status::Unavailable("node {}: node {} at {} is closed", id_, to,
                                 inbox.endpoint);
    }
    if (inbox.queue.size() >= options_.max_queued_messages) {
      return Status::DeadlineExceeded(
          "node {}: {} message to node {} at {} not accepted within {} ms "
          "({} messages queued)",
          id_, MessageTypeName(type), to, inbox.endpoint,
          options_.send_timeout.count(), inbox.queue.size());
    }
    inbox.queue.push_back(std::move(msg));
    return Status::Ok();
  }

  const NodeId id_;
  const InProcOptions options_;
  const std::shared_ptr<InProcHub> hub_;
  // This node's fast path, attached to its inbox at Bind() (messages taken
  // by it are not counted in this node's received statistics).
  const std::shared_ptr<internal::DirectSink> direct_ =
      std::make_shared<internal::DirectSink>();

  mutable Mutex mu_;
  bool closed_ GUARDED_BY(mu_) = false;
  std::shared_ptr<Inbox> inbox_ GUARDED_BY(mu_);
  std::map<NodeId, std::shared_ptr<Inbox>> routes_ GUARDED_BY(mu_);

  std::atomic<uint64_t> messages_sent_{0};
  std::atomic<uint64_t> messages_received_{0};
  std::atomic<uint64_t> bytes_sent_{0};
  std::atomic<uint64_t> bytes_received_{0};
};

}  // namespace

InProcFabric::InProcFabric() : hub_(std::make_shared<InProcHub>()) {}
InProcFabric::~InProcFabric() = default;

Result<std::unique_ptr<Transport>> InProcFabric::NewTransport(
    NodeId id, InProcOptions options) {
  if (id < 0) {
    return Status::InvalidArgument(
        "inproc transport for node id {}: ids are >= 0", id);
  }
  if (options.max_queued_messages == 0) {
    return Status::InvalidArgument(
        "inproc transport for node {}: max_queued_messages must be > 0", id);
  }
  return std::unique_ptr<Transport>(
      std::make_unique<InProcTransport>(id, std::move(options), hub_));
}

}  // namespace strata
