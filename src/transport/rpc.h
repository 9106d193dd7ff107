#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "transport/transport.h"

namespace strata {

// Header flag marking a message as the reply to the request with the same
// request_id (set by RpcEndpoint::Reply).
inline constexpr uint32_t kReplyFlag = 1u << 31;

// The outcome of one request: Wait() blocks until the reply arrives, the
// timeout expires, or the endpoint stops. Thread-safe.
class RpcCall {
 public:
  // The reply, or kDeadlineExceeded naming what was asked of whom, or
  // kCancelled when the endpoint stopped first. A reply of type kError
  // becomes a non-OK status carrying the peer's message. Call once.
  Result<Message> Wait(std::chrono::milliseconds timeout);
  bool Ready() const;

 private:
  friend class RpcEndpoint;
  void Complete(Result<Message> result);

  std::string what_;  // "pull_request to node 3", for timeouts
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;                        // GUARDED_BY(mu_)
  std::unique_ptr<Result<Message>> result_;  // GUARDED_BY(mu_)
};

// Request/reply on top of a Transport. Owns the transport's receive side:
// one thread calls Recv(), completes the RpcCall a reply belongs to, and
// hands every other message to the handler (on that thread, in arrival
// order). Send paths are thread-safe; the handler must not block for long
// (it delays every later message of this node).
// Start() spawns the thread; Stop() (or the destructor) joins it and
// cancels the calls still waiting.
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
  // on. A send failure completes the call at once with that error.
  std::shared_ptr<RpcCall> Request(NodeId to, Message msg);
  // Sends the reply to `request` (same request id, kReplyFlag set).
  Status Reply(const Message& request, Message reply);
  // Sends a kError reply carrying `status`'s text.
  Status ReplyError(const Message& request, const Status& status);
  // Completes every call still waiting with `status` (e.g. the run was
  // stopped by the coordinator), so no thread waits out its timeout.
  void CancelPending(const Status& status);
  // One-way send (no reply expected).
  Status Send(NodeId to, Message msg);

  Transport& transport() { return *transport_; }
  NodeId node_id() const { return transport_->node_id(); }

 private:
  void Loop();
  // The waiting call for a reply's request id (removed), or null.
  std::shared_ptr<RpcCall> TakePending(uint64_t request_id);
  // Completes `call` with `reply` (a kError reply becomes its status).
  void CompleteCall(RpcCall& call, Message reply);

  std::unique_ptr<Transport> transport_;
  Handler handler_;
  std::atomic<bool> running_{false};
  std::thread thread_;
  std::atomic<uint64_t> next_id_{1};
  std::mutex mu_;
  std::map<uint64_t, std::shared_ptr<RpcCall>> pending_;  // GUARDED_BY(mu_)
};

// The text of a kError message's first payload.
std::string ErrorText(const Message& msg);

}  // namespace strata
