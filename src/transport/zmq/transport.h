#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "common/mutex.h"
#include "common/status.h"
#include "transport/message.h"
#include "transport/transport.h"
#include "transport/zmq/curve_keys.h"

namespace zmq {
class context_t;
}  // namespace zmq

namespace strata {

class ZapHandler;

// A ZeroMQ context: the I/O threads that move bytes for the sockets made in
// it. Transports of one process may share one (fewer threads) or own one each
// (the default; I/O of different nodes then runs in parallel, like separate
// processes). Thread-safe. The destructor waits, up to the sockets' linger
// time, for queued outgoing messages; every transport using the context must
// be closed first (they keep it alive, so this holds by construction).
class ZmqContext {
 public:
  // kInvalidArgument for io_threads < 1, kInternal if ZeroMQ refuses.
  static Result<std::shared_ptr<ZmqContext>> Create(int io_threads);
  ~ZmqContext();
  ZmqContext(const ZmqContext&) = delete;
  ZmqContext& operator=(const ZmqContext&) = delete;

  // The cppzmq context, for making sockets in it.
  zmq::context_t& context() { return *context_; }
  int io_threads() const { return io_threads_; }
  // The CURVE authentication handler of this context (zap_handler.h),
  // started on the first call and kept until the context goes away: every
  // CURVE transport in the context registers with it before it binds.
  // Errors as ZapHandler::Start().
  Result<ZapHandler*> zap() EXCLUDES(zap_mu_);

 private:
  ZmqContext(std::unique_ptr<zmq::context_t> context, int io_threads);
  const std::unique_ptr<zmq::context_t> context_;
  const int io_threads_;
  Mutex zap_mu_;
  // Declared after context_: destroyed (its socket closed) before it.
  std::unique_ptr<ZapHandler> zap_ GUARDED_BY(zap_mu_);
};

struct ZmqOptions {
  // Shared context; null makes the transport create and own one.
  std::shared_ptr<ZmqContext> context;
  // I/O threads of an owned context.
  int io_threads = 1;
  // Payloads are cut into frames of at most this many bytes (1 MiB: large
  // single messages are slow in ZeroMQ, ~1 MiB frames stream well).
  size_t frame_bytes = size_t{1} << 20;
  // Largest frame accepted from the network (ZMQ_MAXMSGSIZE); a peer that
  // sends a bigger one is disconnected by ZeroMQ. Must be >= frame_bytes.
  size_t max_frame_bytes = size_t{16} << 20;
  // Queue limits per peer connection, in segments (a segment holds at most
  // frame_bytes of payload, so memory per peer is about hwm * frame_bytes).
  int send_hwm = 512;
  int recv_hwm = 512;
  // How long Send() waits for room in a full queue (slow or absent peer).
  std::chrono::milliseconds send_timeout{30000};
  // How long Close() lets queued outgoing messages drain.
  std::chrono::milliseconds linger{1000};
  // Kernel socket buffers (SO_SNDBUF / SO_RCVBUF); 0 keeps the OS default,
  // which autotunes on Linux.
  int socket_buffer_bytes = 0;
  // Bounds on what is sent and accepted.
  MessageLimits limits;
  // Received multi-frame payloads are assembled in buffers recycled through a
  // pool that caches up to this many bytes.
  size_t receive_pool_bytes = size_t{256} << 20;
  // A message whose remaining segments stop arriving for this long (its
  // sender died half way) is dropped and its memory freed.
  std::chrono::milliseconds stale_message_timeout{60000};
  // When the transport binds a wildcard TCP address (tcp://0.0.0.0:PORT or
  // tcp://*:PORT), endpoint() reports tcp://advertise_host:PORT instead, the
  // address peers on other machines can reach. Empty: report as bound.
  std::string advertise_host;
  // Authentication and encryption (CurveZMQ; curve_keys.h). Set: the ROUTER
  // is a CURVE server that admits only clients with a key in
  // curve->allowed_client_keys (others are refused during the handshake,
  // logged and counted in stats().connections_refused, and nothing they send
  // is delivered; peers without keys are refused by ZeroMQ itself), and
  // every DEALER is a CURVE client; traffic is encrypted. Unset: plain TCP,
  // anyone who reaches the endpoint may send.
  std::optional<CurveKeys> curve;
};

// A transport over ZeroMQ: tcp://host:port and ipc://path endpoints.
//
// Each node binds one ROUTER socket to receive from everyone and opens one
// DEALER socket per peer to send. Messages are cut into segments and frames
// as described in wire.h; payload bytes are handed to ZeroMQ without a copy
// on the sending side, and reassembled on the receiving side (a payload of
// one frame is adopted as is, larger ones are copied frame by frame into a
// pooled buffer while later frames are still arriving). Every received
// segment is validated; malformed input from any peer (including non-strata
// ZeroMQ sockets) is logged, counted in stats().messages_dropped and dropped,
// without harming other peers' traffic.
//
// With ZmqOptions::curve, failed handshakes (a peer without keys, with
// another cluster's keys, or with a key not allowed) are logged and counted
// in stats().connections_refused; handshake failures other than a refused
// key are noticed while Recv() runs. Bind() then also fails (kUnavailable)
// when a socket strata did not make serves ZAP in a shared context.
//
// Thread safety as in Transport: Send() locks only the destination's socket,
// so sends to different peers proceed in parallel; Recv() is serialized.
// kInvalidArgument for a negative id, inconsistent options or malformed
// CURVE keys (naming the key); kUnimplemented for CURVE keys when libzmq has
// no CURVE; kInternal if ZeroMQ cannot create a context.
Result<std::unique_ptr<Transport>> NewZmqTransport(NodeId id,
                                                   ZmqOptions options = {});

// Splits "tcp://HOST:PORT" into HOST and PORT; false for anything else
// (ipc://, inproc://, a missing host or port).
bool SplitTcpEndpoint(const std::string& endpoint, std::string* host,
                      std::string* port);
// True for the hosts a wildcard bind uses ("*", "0.0.0.0").
bool IsWildcardHost(const std::string& host);

}  // namespace strata
