#pragma once

// The class behind NewUcxTransport() (ucx/transport.h), for the files that
// implement it; nothing outside src/transport/ucx includes this. Built only
// when UCX is (STRATA_HAVE_UCX).
//
// Its parts, one file each:
//   worker.cc         the UCP context and worker, the progress thread that
//                     drives them, work posted to it, Close()
//   connection.cc     Bind() (the listener), routes to peers (Connect(),
//                     their UCX endpoints and wireup), accepted endpoints
//   send.cc           Send(): back-pressure, the active message, completion
//   receive.cc        arriving active messages (OnMessage), rendezvous
//                     receives, per-stream ordering, Recv() and the sink
//   shared_memory.cc  which routes go without peer-failure handling
//                     (UcxOptions::shared_memory)
//   transport.cc      NewUcxTransport(), the option spellings, test hooks

#include <netinet/in.h>
#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "transport/buffer.h"
#include "transport/placement.h"
#include "transport/transport.h"
#include "transport/ucx/transport.h"
#include "transport/wire.h"

namespace strata::ucx {

using Clock = std::chrono::steady_clock;
using SharedMemory = UcxOptions::SharedMemory;

inline constexpr unsigned kAmId = 7;  // every message is this active message
inline constexpr char kScheme[] = "ucx://";

inline std::string UcsError(ucs_status_t s) { return ucs_status_string(s); }

// "ucx://HOST:PORT" -> an IPv4 address; PORT may be * or 0 when `bind`.
// kInvalidArgument naming the endpoint (or the host that did not resolve).
Result<sockaddr_in> ParseEndpoint(NodeId id, const std::string& endpoint,
                                  bool bind);

// Calls of UCX's error handler on any endpoint of this process (tests:
// UcxErrorHandlerCallsForTesting).
extern std::atomic<uint64_t> g_error_handler_calls;

// A flush of a new endpoint (UcxTransport::StartWireupFlush). Its callback
// owns one reference (user data), so it may run after every waiter has
// gone.
struct WireupFlush {
  Mutex mu;
  CondVar cv{&mu};
  bool done GUARDED_BY(mu) = false;
  ucs_status_t status GUARDED_BY(mu) = UCS_OK;
};

// A route to a peer: where it listens and, once made, the UCX endpoint.
// `failed` is set when UCX reported the peer lost.
struct Route {
  std::string endpoint;
  sockaddr_in addr{};
  // Without UCX's peer-failure handling, so that UCX may use shared memory
  // and CMA (UcxOptions::shared_memory; UcxTransport::WantsSharedMemory).
  bool shared_memory = false;
  Mutex mu;  // one send at a time: sequence numbers in order
  ucp_ep_h ep GUARDED_BY(mu) = nullptr;
  bool retired GUARDED_BY(mu) = false;  // replaced or disconnected
  // Set by UCX's error handler, which may run on a sender's thread while it
  // holds `mu` (a socket error inside ucp_am_send_nbx): it must not lock.
  // Also set when the connection was not set up (AwaitWireup).
  std::atomic<bool> failed{false};
  // UCX itself reported the endpoint failed (its error handler, or a send
  // status saying the peer is gone): only then may an endpoint without
  // peer-failure handling be closed by force (CloseRoute).
  std::atomic<bool> reported_lost{false};
  // Every message on a route carries (stream, sequence number): UCX may
  // deliver active messages sent while a connection is still being set up
  // after later ones, and the receiver puts them back in order.
  uint32_t stream = 0;
  uint32_t next_seq GUARDED_BY(mu) = 0;
  // UcxOptions::shared_memory: the flush that tells when UCX has set the
  // endpoint's lanes up (UcxTransport::AwaitWireup); null once they are.
  std::shared_ptr<WireupFlush> wireup GUARDED_BY(mu);
};

// The bytes in front of the wire header in an active message's header.
struct Prefix {
  uint32_t stream;
  uint32_t seq;
};

class UcxTransport;

// A send in flight: what must stay alive until UCX is done with it.
struct SendContext {
  Buffer header;       // Prefix, then the wire header
  uint64_t bytes = 0;  // payload bytes, counted in flight until sent
  std::vector<Buffer> payloads;
  std::vector<ucp_dt_iov_t> iov;
  UcxTransport* transport = nullptr;
};

// A received message waiting for its data (rendezvous) or its turn. A gap
// holds the place of a message dropped (and counted) on arrival.
struct Incoming {
  Message msg;
  bool done = false;
  bool failed = false;
  bool gap = false;
};

// A rendezvous receive in flight: where its data goes, and the placement it
// writes into, if any (pinned until it ends).
struct RecvContext {
  std::shared_ptr<Incoming> in;
  std::vector<ucp_dt_iov_t> iov;
  std::shared_ptr<PayloadPlacement> pinned;
  UcxTransport* self = nullptr;
  size_t placed = 0;  // the payload written into `pinned`, if any
};

// The messages of one sender's route, put back in its send order.
struct Stream {
  uint32_t next = 0;  // the sequence number delivered next
  std::map<uint32_t, std::shared_ptr<Incoming>> waiting;
  Clock::time_point last_used = Clock::now();
  // Since when later messages wait for `next` (which may never come:
  // its sender failed to send it).
  Clock::time_point blocked_since{};
};

// A Transport over UCX active messages; the contract is NewUcxTransport()'s
// (ucx/transport.h). Thread-safe as Transport says. One progress thread
// owns the UCX worker between the senders' calls into it (the worker is
// multi-threaded; senders call UCX from their own threads); the fields
// marked "progress thread only" are touched by that thread, and by Close()
// once it has joined it.
class UcxTransport final : public Transport {
 public:
  UcxTransport(NodeId id, UcxOptions options);
  ~UcxTransport() override;
  UcxTransport(const UcxTransport&) = delete;
  UcxTransport& operator=(const UcxTransport&) = delete;

  // Creates the UCP context and worker and starts the progress thread.
  // kInternal / kIoError naming what UCX or the system refused.
  Status Init();

  NodeId node_id() const override { return id_; }
  Status Bind(const std::string& requested) override;
  std::string endpoint() const override EXCLUDES(mu_);
  Status Connect(NodeId peer, const std::string& endpoint) override
      EXCLUDES(mu_);
  Status Disconnect(NodeId peer) override EXCLUDES(mu_);
  Status Send(NodeId to, Message msg) override;
  Result<Message> Recv(std::chrono::milliseconds timeout) override
      EXCLUDES(rx_mu_);
  bool SetDirectDelivery(std::function<bool(Message&)> sink) override
      EXCLUDES(sink_mu_);
  void SetPlacement(PlacementLookup lookup) override EXCLUDES(placement_mu_);
  void Interrupt() override EXCLUDES(rx_mu_);
  void Close() override;
  TransportStats stats() const override;

  // Tests only (UcxRouteInfoForTesting): UCX's description of the route
  // to `peer`, its lanes among it.
  Result<std::string> RouteInfo(NodeId peer);
  // Tests only (SendRawUcxForTesting): one active message with exactly
  // these header and data bytes.
  Status SendRaw(NodeId to, std::vector<uint8_t> am_header,
                 std::vector<uint8_t> data);

 private:
  // --- worker.cc: the context, the worker and the progress thread.
  Status CreateWorker();
  Status WatchWorker();
  // Runs `fn` on the progress thread, which owns the UCX worker. False
  // (and `fn` dropped) once the transport is closed.
  bool Post(std::function<void()> fn) EXCLUDES(mu_);
  // Post() and wait (up to kCallTimeout) for its status.
  Status CallOnProgressThread(std::function<Status()> fn);
  void RunPosted() EXCLUDES(mu_);
  void Progress() EXCLUDES(mu_);
  // Close() after the progress thread is gone: listener, routes, accepted
  // endpoints, sends in flight and the worker.
  void ShutDownWorker() EXCLUDES(mu_);
  // Whether the calling thread is the progress thread (which owns the
  // worker between its calls into UCX, and which nothing must wait for).
  bool OnProgressThread() const {
    return std::this_thread::get_id() == progress_.get_id();
  }

  // --- connection.cc: the listener and the routes to peers.
  Status Listen(const sockaddr_in& addr, const std::string& host,
                const std::string& requested) EXCLUDES(mu_);
  // The route to `to`: NotFound without a Connect(), Cancelled once closed.
  Result<std::shared_ptr<Route>> RouteTo(NodeId to) EXCLUDES(mu_);
  // A route that Post() could not hand to the progress thread (the
  // transport is closing): Close() retires it, since UCX may still call its
  // endpoint's error handler, which points at it.
  void KeepForClose(std::shared_ptr<Route> route) EXCLUDES(mu_);
  bool EnsureEp(Route& route) REQUIRES(route.mu);
  bool StartWireupFlush(Route& route) REQUIRES(route.mu);
  bool AwaitWireup(Route& route) REQUIRES(route.mu);
  // Closes a route's endpoint and keeps the route: UCX may still call its
  // error handler, which points at it, until the worker is gone.
  void Retire(std::shared_ptr<Route> route);
  void CloseRoute(Route& route) EXCLUDES(route.mu);
  void CloseEp(ucp_ep_h ep, bool force);
  void ReapCloseRequests();
  void DrainHandshakes();
  static void OnRouteError(void* arg, ucp_ep_h ep, ucs_status_t status);
  static void OnConnection(ucp_conn_request_h request, void* arg);
  static void OnAcceptedError(void* arg, ucp_ep_h ep, ucs_status_t status);

  // --- send.cc
  Status StartSend(NodeId to, const std::shared_ptr<Route>& route,
                   std::unique_ptr<SendContext> ctx, bool raw = false)
      REQUIRES_SHARED(life_mu_);
  Status WaitForRoom(NodeId to, const Route& route, uint64_t bytes)
      EXCLUDES(inflight_mu_);
  // Whether a send of `bytes` may go (or the transport closed).
  bool HasRoom(uint64_t bytes) const REQUIRES(inflight_mu_);
  Status CheckRoute(NodeId to, Route& route) REQUIRES(route.mu);
  Status Submit(NodeId to, Route& route, std::unique_ptr<SendContext> ctx,
                bool raw, bool on_progress) REQUIRES(route.mu)
      REQUIRES_SHARED(life_mu_);
  Status Lost(NodeId to, const Route& route, const std::string& why) const;
  void ReleaseInflight(uint64_t bytes) EXCLUDES(inflight_mu_);
  int64_t SendsInFlight() EXCLUDES(inflight_mu_);
  static void OnSent(void* request, ucs_status_t status, void* user);
  static uint32_t NewStreamId();

  // --- receive.cc
  static ucs_status_t OnMessage(void* arg, const void* header,
                                size_t header_length, void* data, size_t length,
                                const ucp_am_recv_param_t* param);
  ucs_status_t Receive(const void* header, size_t header_length, void* data,
                       size_t length, bool rndv);
  Status CheckArrival(const Prefix& prefix,
                      const Result<wire::DecodedHeader>& decoded, size_t length,
                      Stream** stream);
  void DropArrival(const Status& why, const Prefix& prefix,
                   const Result<wire::DecodedHeader>& decoded,
                   const Stream* stream);
  // Where each payload of `in` goes (`place` takes payload `placed`), the
  // rest in one pooled block; returns the I/O vector of the non-empty ones
  // and, in *where, each payload's first byte.
  std::vector<ucp_dt_iov_t> LayOut(
      const std::vector<uint64_t>& sizes,
      const std::shared_ptr<PayloadPlacement>& place, size_t placed,
      Incoming& in, std::vector<uint8_t*>* where);
  void StartRendezvous(void* data, const std::shared_ptr<Incoming>& in,
                       std::vector<ucp_dt_iov_t> iov,
                       std::shared_ptr<PayloadPlacement> place, size_t placed);
  static void OnRecvData(void* request, ucs_status_t status, size_t length,
                         void* user);
  // A rendezvous receive is over (done, failed, or the worker is gone):
  // nothing writes into its buffers any more.
  void EndRecv(RecvContext* rc);
  std::shared_ptr<PayloadPlacement> PlacementFor(const MessageHeader& h)
      EXCLUDES(placement_mu_);
  // Hands finished messages to Recv() or the sink, each stream in its send
  // order.
  void Deliver();
  void TakeInOrder(Clock::time_point now, std::vector<Message>* out);
  void PruneStreams(Clock::time_point now);
  void HandOver(std::vector<Message> out) EXCLUDES(sink_mu_, rx_mu_);
  // A message handed over, by Recv() or to the direct-delivery sink.
  void CountReceived(uint64_t payload_bytes);

  // --- shared_memory.cc
  bool WantsSharedMemory(in_addr peer) const;
  void FindLocalAddresses();
  static ucp_err_handling_mode_t ErrorMode(bool shared_memory);

  const NodeId id_;
  const UcxOptions options_;
  // Which endpoints go without peer-failure handling, so that UCX may pick
  // shared memory and CMA (UcxOptions::shared_memory; WantsSharedMemory).
  const SharedMemory mode_;
  std::set<in_addr_t> local_addrs_;  // this machine's, filled by Init()
  const std::shared_ptr<BufferPool> pool_ =
      BufferPool::Create(size_t{256} << 20);
  // Set by Init(); worker_ is used by the senders (UCX serializes them)
  // and the progress thread, and destroyed by Close() once both are done.
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_listener_h listener_ = nullptr;  // progress thread only
  size_t max_am_header_ = 0;
  int efd_ = -1;
  int epoll_ = -1;
  std::thread progress_;
  std::atomic<bool> closed_{false};
  // Senders inside UCX hold it shared; Close() takes it once to wait for
  // them before it takes the worker away.
  SharedMutex life_mu_;

  mutable Mutex mu_;
  std::string endpoint_ GUARDED_BY(mu_);
  std::map<NodeId, std::shared_ptr<Route>> routes_ GUARDED_BY(mu_);
  std::vector<std::shared_ptr<Route>> orphaned_ GUARDED_BY(mu_);
  std::deque<std::function<void()>> posted_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;

  // Progress thread only.
  std::set<ucp_ep_h> accepted_;
  std::vector<std::shared_ptr<Route>> closing_;
  std::vector<void*> close_requests_;
  std::map<uint64_t, Stream> streams_;  // by (sender << 32 | stream id)
  std::set<RecvContext*> recvs_;        // rendezvous receives in flight
  Clock::time_point last_prune_ = Clock::now();

  // Payload bytes of sends UCX has not finished (back-pressure).
  Mutex inflight_mu_;
  CondVar inflight_cv_{&inflight_mu_};
  uint64_t inflight_bytes_ GUARDED_BY(inflight_mu_) = 0;
  int64_t inflight_sends_ GUARDED_BY(inflight_mu_) = 0;

  Mutex placement_mu_;
  PlacementLookup placement_ GUARDED_BY(placement_mu_);

  // Held while the sink runs; Deliver() takes rx_mu_ inside it.
  Mutex sink_mu_ ACQUIRED_BEFORE(rx_mu_);
  std::function<bool(Message&)> sink_ GUARDED_BY(sink_mu_);
  Mutex rx_mu_;
  CondVar rx_cv_{&rx_mu_};
  std::deque<Message> ready_ GUARDED_BY(rx_mu_);
  bool interrupted_ GUARDED_BY(rx_mu_) = false;

  std::atomic<uint64_t> messages_sent_{0}, messages_received_{0},
      bytes_sent_{0}, bytes_received_{0}, dropped_{0};
};

}  // namespace strata::ucx
