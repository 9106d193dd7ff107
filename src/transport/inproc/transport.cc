#include "transport/inproc_transport.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <utility>

#include "common/log.h"

namespace strata {
namespace internal {

// One endpoint's queue of messages.
// The receiver's fast path (Transport::SetDirectDelivery): senders call `fn`
// under a shared lock; replacing it takes the lock exclusively.
struct DirectSink {
  std::shared_mutex mu;
  std::function<bool(Message&)> fn;  // Guarded by mu.
};

struct Inbox {
  explicit Inbox(std::string endpoint) : endpoint(std::move(endpoint)) {}
  const std::string endpoint;
  std::shared_ptr<DirectSink> sink;  // Set once, at Bind(); then read-only.
  std::mutex mu;
  std::condition_variable not_empty;
  std::condition_variable not_full;
  std::deque<Message> queue;  // Guarded by mu.
  bool bound = false;         // Guarded by mu.
  bool closed = false;        // Guarded by mu.
};

// Endpoint name -> inbox. An inbox exists from the first Bind() or Connect()
// that names it until its owner closes.
class InProcHub {
 public:
  // The inbox for `endpoint`, created unbound if nobody named it yet.
  std::shared_ptr<Inbox> Lookup(const std::string& endpoint) {
    std::lock_guard<std::mutex> lock(mu_);
    std::shared_ptr<Inbox>& inbox = inboxes_[endpoint];
    if (!inbox) inbox = std::make_shared<Inbox>(endpoint);
    return inbox;
  }

  // The current inbox for `endpoint`, or null if nobody names it now.
  std::shared_ptr<Inbox> Find(const std::string& endpoint) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = inboxes_.find(endpoint);
    return it == inboxes_.end() ? nullptr : it->second;
  }

  Result<std::shared_ptr<Inbox>> Bind(const std::string& endpoint) {
    std::string name = endpoint;
    if (endpoint == "inproc://*") {
      std::lock_guard<std::mutex> lock(mu_);
      do {
        name = "inproc://auto-" + std::to_string(next_auto_++);
      } while (inboxes_.count(name) > 0);
    }
    std::shared_ptr<Inbox> inbox = Lookup(name);
    std::lock_guard<std::mutex> lock(inbox->mu);
    if (inbox->bound) {
      return Status::Unavailable("{} is already bound by another node", name);
    }
    inbox->bound = true;
    return inbox;
  }

  // Called by the owner on close; a later Bind() of the name gets a new inbox.
  void Remove(const std::shared_ptr<Inbox>& inbox) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = inboxes_.find(inbox->endpoint);
    if (it != inboxes_.end() && it->second == inbox) inboxes_.erase(it);
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Inbox>> inboxes_;  // Guarded by mu_.
  uint64_t next_auto_ = 0;                                 // Guarded by mu_.
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

  Status Bind(const std::string& endpoint) override {
    if (!IsInProcEndpoint(endpoint)) {
      return Status::InvalidArgument(
          "node {}: inproc transport cannot bind '{}' (want inproc://NAME)",
          id_, endpoint);
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return Status::Cancelled("node {}: transport is closed", id_);
    if (inbox_) {
      return Status::FailedPrecondition("node {}: already bound to {}", id_,
                                        inbox_->endpoint);
    }
    ASSIGN_OR_RETURN(inbox_, hub_->Bind(endpoint));
    std::lock_guard<std::mutex> inbox_lock(inbox_->mu);
    inbox_->sink = direct_;
    return Status::Ok();
  }

  bool DeliversOnSendersThreads() const override { return true; }

  bool SetDirectDelivery(std::function<bool(Message&)> sink) override {
    std::unique_lock<std::shared_mutex> lock(direct_->mu);
    direct_->fn = std::move(sink);
    return true;
  }

  std::string endpoint() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return inbox_ ? inbox_->endpoint : std::string();
  }

  Status Connect(NodeId peer, const std::string& endpoint) override {
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
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return Status::Cancelled("node {}: transport is closed", id_);
    routes_[peer] = std::move(inbox);
    return Status::Ok();
  }

  Status Disconnect(NodeId peer) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (routes_.erase(peer) == 0) {
      return Status::NotFound("node {}: no route to node {}", id_, peer);
    }
    return Status::Ok();
  }

  Status Send(NodeId to, Message msg) override {
    if (Status s = ValidateOutgoing(msg, options_.limits); !s.ok()) {
      return s.WithContext(fmt::format("node {} -> {}", id_, to));
    }
    std::shared_ptr<Inbox> inbox;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_)
        return Status::Cancelled("node {}: transport is closed", id_);
      auto it = routes_.find(to);
      if (it == routes_.end()) {
        return Status::NotFound(
            "node {} has no route to node {}; Connect() first", id_, to);
      }
      inbox = it->second;
    }
    msg.header.sender = id_;
    msg.header.receiver = to;
    const uint64_t bytes = msg.payload_bytes();
    const MessageType type = msg.header.type;

    std::shared_ptr<internal::DirectSink> sink;
    {
      std::lock_guard<std::mutex> lock(inbox->mu);
      if (!inbox->closed) sink = inbox->sink;
    }
    if (sink) {
      // The receiver's fast path: taken on this thread, no queue, no wake-up
      // of its receive thread.
      std::shared_lock<std::shared_mutex> lock(sink->mu);
      if (sink->fn && sink->fn(msg)) {
        messages_sent_.fetch_add(1, std::memory_order_relaxed);
        bytes_sent_.fetch_add(bytes, std::memory_order_relaxed);
        return Status::Ok();
      }
    }

    std::unique_lock<std::mutex> lock(inbox->mu);
    if (inbox->closed) {
      // The peer may have restarted on the same name: follow it.
      lock.unlock();
      std::shared_ptr<Inbox> fresh = hub_->Find(inbox->endpoint);
      if (!fresh) {
        return Status::Unavailable("node {}: node {} at {} is closed", id_, to,
                                   inbox->endpoint);
      }
      {
        std::lock_guard<std::mutex> routes_lock(mu_);
        auto it = routes_.find(to);
        if (it != routes_.end() && it->second == inbox) it->second = fresh;
      }
      inbox = std::move(fresh);
      lock = std::unique_lock<std::mutex>(inbox->mu);
    }
    const bool room =
        inbox->not_full.wait_for(lock, options_.send_timeout, [&] {
          return inbox->closed ||
                 inbox->queue.size() < options_.max_queued_messages;
        });
    if (inbox->closed) {
      return Status::Unavailable("node {}: node {} at {} is closed", id_, to,
                                 inbox->endpoint);
    }
    if (!room) {
      return Status::DeadlineExceeded(
          "node {}: {} message to node {} at {} not accepted within {} ms "
          "({} messages queued)",
          id_, MessageTypeName(type), to, inbox->endpoint,
          options_.send_timeout.count(), inbox->queue.size());
    }
    inbox->queue.push_back(std::move(msg));
    lock.unlock();
    inbox->not_empty.notify_one();
    messages_sent_.fetch_add(1, std::memory_order_relaxed);
    bytes_sent_.fetch_add(bytes, std::memory_order_relaxed);
    return Status::Ok();
  }

  Result<Message> Recv(std::chrono::milliseconds timeout) override {
    std::shared_ptr<Inbox> inbox;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_)
        return Status::Cancelled("node {}: transport is closed", id_);
      if (!inbox_) {
        return Status::FailedPrecondition("node {}: Recv() before Bind()", id_);
      }
      inbox = inbox_;
    }
    std::unique_lock<std::mutex> lock(inbox->mu);
    inbox->not_empty.wait_for(
        lock, timeout, [&] { return inbox->closed || !inbox->queue.empty(); });
    if (inbox->closed) {
      return Status::Cancelled("node {}: transport closed while receiving",
                               id_);
    }
    if (inbox->queue.empty()) {
      return Status::DeadlineExceeded(
          "node {}: no message arrived at {} within {} ms", id_,
          inbox->endpoint, timeout.count());
    }
    Message msg = std::move(inbox->queue.front());
    inbox->queue.pop_front();
    lock.unlock();
    inbox->not_full.notify_one();
    messages_received_.fetch_add(1, std::memory_order_relaxed);
    bytes_received_.fetch_add(msg.payload_bytes(), std::memory_order_relaxed);
    return msg;
  }

  void Close() override {
    std::shared_ptr<Inbox> inbox;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return;
      closed_ = true;
      inbox = std::move(inbox_);
      routes_.clear();
    }
    if (!inbox) return;
    hub_->Remove(inbox);
    size_t dropped = 0;
    {
      std::lock_guard<std::mutex> lock(inbox->mu);
      inbox->closed = true;
      dropped = inbox->queue.size();
      inbox->queue.clear();
    }
    inbox->not_empty.notify_all();
    inbox->not_full.notify_all();
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
  const NodeId id_;
  const InProcOptions options_;
  const std::shared_ptr<InProcHub> hub_;
  // This node's fast path, attached to its inbox at Bind() (messages taken
  // by it are not counted in this node's received statistics).
  const std::shared_ptr<internal::DirectSink> direct_ =
      std::make_shared<internal::DirectSink>();

  mutable std::mutex mu_;
  bool closed_ = false;                              // Guarded by mu_.
  std::shared_ptr<Inbox> inbox_;                     // Guarded by mu_.
  std::map<NodeId, std::shared_ptr<Inbox>> routes_;  // Guarded by mu_.

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
