#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "transport/transport.h"

namespace strata {

// Header flag marking a message as the reply to the request with the same
// request_id (set by RpcEndpoint::Reply).
inline constexpr uint32_t kReplyFlag = 1u << 31;

class RpcEndpoint;
namespace rpc_internal {
struct EndpointState;
}  // namespace rpc_internal

// The outcome of one request: Wait() blocks until the reply arrives, the
// timeout expires, or the endpoint stops. Thread-safe.
class RpcCall {
 public:
  // The reply, or kDeadlineExceeded naming what was asked of whom, or
  // kCancelled when the endpoint stopped first. A reply of type kError
  // becomes a non-OK status carrying the peer's message. Call once.
  Result<Message> Wait(std::chrono::milliseconds timeout) EXCLUDES(mu_);
  bool Ready() const EXCLUDES(mu_);
  // When the request was sent and its reply (or error) came, on this
  // process's steady clock in ns (common/timeline.h NowNs); 0 until then.
  int64_t sent_ns() const { return sent_ns_; }
  int64_t completed_ns() const { return completed_ns_.load(); }

 private:
  friend class RpcEndpoint;
  friend struct rpc_internal::EndpointState;
  void Complete(Result<Message> result) EXCLUDES(mu_);

  std::string what_;  // "pull_request to node 3", for timeouts
  NodeId to_ = kInvalidNodeId;
  NodeId from_ = kInvalidNodeId;
  int64_t sent_ns_ = 0;
  std::atomic<int64_t> completed_ns_{0};
  // With the timeline on (common/timeline.h): the request's span, from its
  // send to its reply, is recorded under this name.
  const char* span_name_ = nullptr;
  // Where the reply's payload goes as it arrives, if the transport can.
  std::shared_ptr<PayloadPlacement> placement_;
  // Set when waiting callers receive their replies themselves (RpcEndpoint).
  std::weak_ptr<rpc_internal::EndpointState> endpoint_;
  // Set when the reply is delivered on another thread of this process
  // (direct delivery): Wait() polls before sleeping (spin_wait.h).
  bool in_process_ = false;
  mutable Mutex mu_;
  CondVar cv_{&mu_};
  // Set under mu_; atomic so that a spinning Wait() can poll it without.
  std::atomic<bool> done_{false};
  std::unique_ptr<Result<Message>> result_ GUARDED_BY(mu_);
};

// Request/reply on top of a Transport. Owns the transport's receive side and
// a thread that serves it: it completes the RpcCall a reply belongs to and
// hands every other message to the handler (on that thread, in arrival
// order). Send paths are thread-safe; the handler must not block for long
// (it delays every later message of this node).
//
// Callers receive their own replies (leader/follower). Over a transport
// without direct delivery (ZeroMQ), a thread waiting in RpcCall::Wait()
// takes the receiving side itself, so a reply wakes the thread that waits
// for it, not the endpoint's thread, which would then wake the waiter. One
// thread receives at a time; it completes whatever replies it gets and
// queues other messages for the endpoint's thread. Order is kept: once a
// message is queued for the handler, every later one (replies too) goes
// through the same queue. While callers wait, and for a short linger after
// the last one (so that a loop of requests keeps the role), the endpoint's
// thread leaves the receiving side alone; if it is receiving when a caller
// arrives, the caller interrupts it (Transport::Interrupt()). Over a
// transport with direct delivery (Transport::SetDirectDelivery), replies are
// instead completed on the thread that delivers them: the replier's in
// process, UCX's progress thread over UCX.
//
// Start() spawns the thread; Stop() (or the destructor) joins it, cancels
// the calls still waiting and waits for callers to leave.
class RpcEndpoint {
 public:
  using Handler = std::function<void(Message)>;

  RpcEndpoint(std::unique_ptr<Transport> transport, Handler handler);
  ~RpcEndpoint();
  RpcEndpoint(const RpcEndpoint&) = delete;
  RpcEndpoint& operator=(const RpcEndpoint&) = delete;

  void Start();
  // Stops the receive thread and closes the transport.
  void Stop();

  // Sends `msg` to `to` with a fresh request id and returns the call to wait
  // on. A send failure completes the call at once with that error. With a
  // `placement`, a reply from `to` is received in place where the transport
  // can (placement.h; the caller revokes it before its memory goes away).
  std::shared_ptr<RpcCall> Request(
      NodeId to, Message msg,
      std::shared_ptr<PayloadPlacement> placement = nullptr);
  // Sends the reply to `request` (same request id, kReplyFlag set).
  Status Reply(const Message& request, Message reply);
  // Sends a kError reply carrying `status`'s text and code (the header's
  // clock): the caller's Wait() returns a status with the same code.
  Status ReplyError(const Message& request, const Status& status);
  // Reply() / ReplyError() for handlers that have no one to return a failed
  // send to: the failure is logged with its cause (the caller then reports
  // its own timeout, and the log says why).
  void ReplyOrLog(const Message& request, Message reply);
  void ReplyErrorOrLog(const Message& request, const Status& status);
  // Completes every call still waiting with `status` (e.g. the run was
  // stopped by the coordinator), so no thread waits out its timeout; every
  // later Request() fails at once with it too.
  void CancelPending(const Status& status);
  // One-way send (no reply expected).
  Status Send(NodeId to, Message msg);
  // Inline handling (a transport with direct delivery): a request for which
  // `may_inline(header)` is true is handled on the thread that delivers it
  // when this endpoint is idle (nothing queued for its thread, nothing being
  // handled), instead of being queued for the endpoint's thread. That saves
  // a thread hand-off. In process the delivering thread is the sender's,
  // when it is inside an InlineSendScope, and the work is done on the core
  // (and in the cache) of the thread that made the data. Over UCX it is the
  // transport's progress thread, which then sends the reply on itself.
  // Order is kept and one message is handled at a time, as without it.
  // Handlers of such messages must not wait for anything the delivering
  // thread would do (it is busy running them): no reply, no other message.
  // Before Start(); null turns it off.
  void SetInlineHandling(std::function<bool(const MessageHeader&)> may_inline);
  // Messages handled inline so far, by every endpoint of this process (a
  // diagnostic: tests check that the path is taken).
  static uint64_t HandledInline();
  // Restart of a lost peer (cluster.restart): with `keep` on, each request
  // keeps a view of its message (sharing the payload bytes, no copy) until
  // its reply arrives, and Resend(to) sends every request to `to` still
  // waiting for its reply again (the peer was restarted and lost what it
  // had received). Returns how many were sent.
  void KeepRequestsForResend(bool keep);
  int Resend(NodeId to);

  Transport& transport();
  NodeId node_id() const;
  // Whether waiting callers receive their replies themselves (above); known
  // after Start().
  bool callers_receive() const;

 private:
  void Loop();

  // Shared with the calls (weakly), so that a call never outlives what its
  // Wait() uses.
  std::shared_ptr<rpc_internal::EndpointState> state_;
  Handler handler_;
  std::function<bool(const MessageHeader&)> may_inline_;
  std::atomic<bool> running_{false};
  std::thread thread_;
  std::atomic<uint64_t> next_id_{1};
};

// Marks the current thread, while it lives, as one whose sends may be
// handled on it (RpcEndpoint::SetInlineHandling), or (`on` false) as one
// whose sends may not. In: a thread that has nothing else to do until the
// answer or its next piece of work (a worker at the end of its step, a
// pipelining reducer between ranges). Out: sends that should leave the
// work to the receiver's thread (a push that travels while the next step
// computes; all but the last node of a fan-out, whose threads then work in
// parallel; what an inline handler itself sends). Nests: the previous
// state comes back when it goes.
class InlineSendScope {
 public:
  explicit InlineSendScope(bool on = true);
  ~InlineSendScope();
  InlineSendScope(const InlineSendScope&) = delete;
  InlineSendScope& operator=(const InlineSendScope&) = delete;
  // Whether the current thread is inside one.
  static bool active();

 private:
  const bool previous_;
};

// The text of a kError message's first payload.
std::string ErrorText(const Message& msg);

}  // namespace strata
