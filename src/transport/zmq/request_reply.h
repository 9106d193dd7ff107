#pragma once

// One request, one reply, over ZeroMQ (REQ/REP): a small control channel
// beside the cluster's transport (the launcher's control endpoint,
// launch/control_endpoint.h). With CurveKeys the server is a CURVE server
// that admits only the allowed client keys (zap_handler.h), and the client
// a CURVE client: the channel is authenticated and encrypted as the
// cluster's own messages are under cluster.security = "curve".

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "common/status.h"
#include "transport/zmq/curve_keys.h"

namespace zmq {
class socket_t;
}  // namespace zmq

namespace strata {

class ZmqContext;

// Serves requests on its own thread: each request's text goes to the
// handler, whose return is the reply. One request at a time (a handler may
// take long; the next client waits). Thread-safe; the destructor stops and
// joins the thread and closes the socket.
class ReplyServer {
 public:
  using Handler = std::function<std::string(const std::string& request)>;

  // Binds `endpoint` (tcp://IP:PORT, tcp://IP:* for any port) and starts
  // serving. kInvalidArgument for a bad endpoint or keys, kUnavailable when
  // the address cannot be bound (in use), kUnimplemented without CURVE in
  // libzmq when keys are given.
  static Result<std::unique_ptr<ReplyServer>> Start(
      const std::string& endpoint, const std::optional<CurveKeys>& curve,
      Handler handler);
  ~ReplyServer();
  ReplyServer(const ReplyServer&) = delete;
  ReplyServer& operator=(const ReplyServer&) = delete;

  // The bound endpoint (the port resolved).
  const std::string& endpoint() const { return endpoint_; }

 private:
  ReplyServer() = default;
  void Serve();

  std::shared_ptr<ZmqContext> context_;
  std::unique_ptr<zmq::socket_t> socket_;
  std::string domain_;  // the ZAP domain under CURVE
  Handler handler_;
  std::string endpoint_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Sends `request` to the ReplyServer at `endpoint` and waits up to
// `timeout` for the reply. kDeadlineExceeded naming the endpoint when none
// came (a server that refused this client's CURVE key never answers);
// kInvalidArgument for a bad endpoint; kInternal if ZeroMQ fails.
Result<std::string> RequestReply(const std::string& endpoint,
                                 const std::optional<CurveKeys>& curve,
                                 const std::string& request,
                                 std::chrono::milliseconds timeout);

}  // namespace strata
