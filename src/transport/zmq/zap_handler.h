#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"

namespace zmq {
class context_t;
class socket_t;
}  // namespace zmq

namespace strata {

// Decides which CURVE clients the CURVE servers of one ZeroMQ context admit:
// the ZeroMQ authentication protocol (ZAP, rfc.zeromq.org/spec/27). During
// each CURVE handshake ZeroMQ asks the socket bound at
// inproc://zeromq.zap.01 in the server's context, giving the server's ZAP
// domain, the peer's address and the client's public key; this handler
// answers 200 for a key allowed in that domain and 400 for any other (and
// for a domain nobody registered), logging the refusal once per key and
// domain with the peer's address.
//
// One per context (ZeroMQ allows one ZAP socket per context); ZmqContext
// starts it on first use, and the ZeroMQ transports sharing that context
// register one domain each. Peers without CURVE (the NULL mechanism) never
// get this far: ZeroMQ ends their handshake on the mechanism mismatch.
//
// Caution: while no socket is bound at the ZAP address, ZeroMQ admits every
// CURVE client holding the server's public key. So the handler is bound
// before any CURVE server socket is, and unbound only when destroyed (after
// every socket of the context is closed).
//
// Thread-safe. Start() binds and spawns the handler's thread; the destructor
// stops and joins it and closes the socket, and must run before the context
// is terminated.
class ZapHandler {
 public:
  // Binds inproc://zeromq.zap.01 in `context` and starts serving.
  // kUnavailable if another ZAP handler is bound in this context, kInternal
  // if ZeroMQ refuses otherwise.
  static Result<std::unique_ptr<ZapHandler>> Start(zmq::context_t& context);
  ~ZapHandler();
  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;

  // Registers a CURVE server: returns the ZAP domain it must set
  // (ZMQ_ZAP_DOMAIN) before binding. Clients presenting a key in `allowed`
  // (Z85, as CheckCurveKey() accepts) are admitted; each refusal adds one to
  // *refused. `who` names the server in log lines ("node 3").
  // kInvalidArgument for a malformed key.
  Result<std::string> Register(const std::vector<std::string>& allowed,
                               const std::string& who,
                               std::shared_ptr<std::atomic<uint64_t>> refused)
      EXCLUDES(mu_);
  // Forgets a domain; later handshakes for it are refused. Idempotent.
  void Unregister(const std::string& domain) EXCLUDES(mu_);

 private:
  struct Domain {
    std::set<std::string> allowed;  // 32-byte binary keys
    std::string who;
    std::shared_ptr<std::atomic<uint64_t>> refused;
    std::set<std::string> logged;  // refused keys already logged
  };

  ZapHandler(std::unique_ptr<zmq::socket_t> socket, int wake_fd);
  void Serve();
  // The reply's status code and text for one request's frames.
  std::vector<std::string> Answer(const std::vector<std::string>& request)
      EXCLUDES(mu_);

  const std::unique_ptr<zmq::socket_t> socket_;  // used by the thread only
  const int wake_fd_;  // readable when the thread must stop
  std::atomic<bool> stop_{false};
  std::thread thread_;

  Mutex mu_;
  std::map<std::string, Domain> domains_ GUARDED_BY(mu_);
  uint64_t next_domain_ GUARDED_BY(mu_) = 1;
};

}  // namespace strata
