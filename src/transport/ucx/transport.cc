#include "transport/ucx_transport.h"

namespace strata {
namespace {

struct SharedMemorySpelling {
  UcxOptions::SharedMemory mode;
  const char* config;
  const char* env;
};
constexpr SharedMemorySpelling kSharedMemorySpellings[] = {
    {UcxOptions::SharedMemory::kAuto, "auto", "auto"},
    {UcxOptions::SharedMemory::kOn, "on", "1"},
    {UcxOptions::SharedMemory::kOff, "off", "0"},
};

}  // namespace

std::optional<UcxOptions::SharedMemory> UcxSharedMemoryFromConfig(
    std::string_view value) {
  for (const auto& s : kSharedMemorySpellings) {
    if (value == s.config) return s.mode;
  }
  return std::nullopt;
}

std::optional<UcxOptions::SharedMemory> UcxSharedMemoryFromEnv(
    std::string_view value) {
  for (const auto& s : kSharedMemorySpellings) {
    if (value == s.env) return s.mode;
  }
  return std::nullopt;
}

const char* UcxSharedMemoryEnvValue(UcxOptions::SharedMemory mode) {
  for (const auto& s : kSharedMemorySpellings) {
    if (mode == s.mode) return s.env;
  }
  return "auto";
}

}  // namespace strata

#ifdef STRATA_HAVE_UCX

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/log.h"
#include "transport/placement.h"
#include "transport/wire.h"

namespace strata {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr unsigned kAmId = 7;  // every message is this active message
constexpr char kScheme[] = "ucx://";
constexpr size_t kAlign = 64;  // each received payload starts aligned
// How long a call made on the progress thread (Bind) may take.
constexpr milliseconds kCallTimeout{10000};
// How long later messages of a stream wait for a missing one.
constexpr milliseconds kGapTimeout{5000};
// A stream idle this long is forgotten (looked at every kPruneEvery); a
// cluster's routes carry heartbeats every 0.5 s.
constexpr milliseconds kIdleStream{60000};
constexpr milliseconds kPruneEvery{10000};
// Close(): how long connection handshakes under way get to finish before
// the listener goes (DrainHandshakes).
constexpr milliseconds kHandshakeQuiet{50};
constexpr milliseconds kHandshakeDrain{500};

std::string UcsError(ucs_status_t s) { return ucs_status_string(s); }

// Errors that say the peer cannot be reached any more (it closed, died or
// stopped answering), as opposed to a fault on this side.
bool PeerGone(ucs_status_t s) {
  return s == UCS_ERR_ENDPOINT_TIMEOUT || s == UCS_ERR_CONNECTION_RESET ||
         s == UCS_ERR_UNREACHABLE || s == UCS_ERR_NOT_CONNECTED ||
         s == UCS_ERR_REJECTED || s == UCS_ERR_CANCELED;
}

// "ucx://HOST:PORT" -> an IPv4 address; PORT may be * or 0 when `bind`.
Result<sockaddr_in> ParseEndpoint(NodeId id, const std::string& endpoint,
                                  bool bind) {
  const auto bad = [&] {
    return Status::InvalidArgument(
        "node {}: '{}' is not a UCX endpoint: want ucx://HOST:PORT{}", id,
        endpoint, bind ? " (PORT * or 0 for any)" : "");
  };
  if (endpoint.rfind(kScheme, 0) != 0) return bad();
  const std::string rest = endpoint.substr(sizeof(kScheme) - 1);
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0) return bad();
  const std::string host = rest.substr(0, colon);
  const std::string port = rest.substr(colon + 1);
  int port_number = 0;
  if (port == "*") {
    if (!bind) return bad();
  } else {
    if (port.empty() || port.size() > 5 ||
        port.find_first_not_of("0123456789") != std::string::npos)
      return bad();
    port_number = std::stoi(port);
    if (port_number > 65535 || (port_number == 0 && !bind)) return bad();
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port_number));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    addrinfo* found = nullptr;
    if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 ||
        found == nullptr) {
      return Status::InvalidArgument("node {}: cannot resolve host '{}' of {}",
                                     id, host, endpoint);
    }
    addr.sin_addr = reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr;
    freeaddrinfo(found);
  }
  return addr;
}

// A route to a peer: where it listens and, once the progress thread made
// it, the UCX endpoint. `failed` is set when UCX reported the peer lost.
struct Route {
  std::string endpoint;
  sockaddr_in addr{};
  // Without UCX's peer-failure handling, so that UCX may use shared memory
  // and CMA (UcxOptions::shared_memory; UcxTransport::WantsSharedMemory).
  bool shared_memory = false;
  std::mutex mu;          // one send at a time: sequence numbers in order
  ucp_ep_h ep = nullptr;  // Guarded by mu.
  bool retired = false;   // Guarded by mu: replaced or disconnected
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
  uint32_t next_seq = 0;  // Guarded by mu.
  // UcxOptions::shared_memory: the flush that tells when UCX has set the
  // endpoint's lanes up (UcxTransport::AwaitWireup); null once they are.
  std::shared_ptr<struct WireupFlush> wireup;  // Guarded by mu.
};

// A flush of a new endpoint. Its callback owns one reference (user data),
// so it may run after every waiter has gone.
struct WireupFlush {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;             // Guarded by mu.
  ucs_status_t status = UCS_OK;  // Guarded by mu.
};

// The bytes in front of the wire header in an active message's header.
struct Prefix {
  uint32_t stream;
  uint32_t seq;
};

// Calls of UCX's error handler on any endpoint of this process (tests:
// UcxErrorHandlerCallsForTesting).
std::atomic<uint64_t> g_error_handler_calls{0};

// UcxOptions::shared_memory when the options leave it unset.
constexpr const char* kSharedMemoryEnv = "STRATA_UCX_SHARED_MEMORY";

// A send in flight: what must stay alive until UCX is done with it.
struct SendContext {
  Buffer header;       // Prefix, then the wire header
  uint64_t bytes = 0;  // payload bytes, counted in flight until sent
  std::vector<Buffer> payloads;
  std::vector<ucp_dt_iov_t> iov;
  class UcxTransport* transport = nullptr;
};

// A received message waiting for its data (rendezvous) or its turn. A gap
// holds the place of a message dropped (and counted) on arrival.
struct Incoming {
  Message msg;
  bool done = false;
  bool failed = false;
  bool gap = false;
};

class UcxTransport;

// A rendezvous receive in flight: where its data goes, and the placement it
// writes into, if any (pinned until it ends).
struct RecvContext {
  std::shared_ptr<Incoming> in;
  std::vector<ucp_dt_iov_t> iov;
  std::shared_ptr<PayloadPlacement> pinned;
  UcxTransport* self = nullptr;
  size_t placed = 0;  // the payload written into `pinned`, if any
};

using SharedMemory = UcxOptions::SharedMemory;

class UcxTransport final : public Transport {
 public:
  UcxTransport(NodeId id, UcxOptions options)
      : id_(id),
        options_(std::move(options)),
        mode_(options_.shared_memory.value_or(SharedMemory::kAuto)) {}

  ~UcxTransport() override { Close(); }

  Status Init() {
    ucp_config_t* config = nullptr;
    ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
    if (s != UCS_OK) {
      return Status::Internal("node {}: UCX configuration: {}", id_,
                              UcsError(s));
    }
    // Messages below 512 KiB go eagerly (copied through UCX's buffers)
    // instead of by rendezvous, whose extra round trip of wake-ups cost
    // more than the copies for LeNet's 177 KB pushes on 2 vCPUs
    // (docs/transport.md). UCX_RNDV_THRESH in the environment wins.
    if (std::getenv("UCX_RNDV_THRESH") == nullptr)
      (void)ucp_config_modify(config, "RNDV_THRESH", "512kb");
    // The worker is shared by the senders' threads and the progress thread
    // (multi-thread mode below). UCX guards it with a spinlock unless told
    // otherwise; with more threads than cores, a holder that is descheduled
    // keeps the others spinning for their whole time slice. A mutex sleeps
    // instead: ps_bench 2+2 at 1 MiB on 2 vCPUs, pulls 0.27 -> 0.35x raw and
    // pushes 0.46 -> 0.64x (docs/transport.md). UCX_USE_MT_MUTEX in the
    // environment wins.
    if (std::getenv("UCX_USE_MT_MUTEX") == nullptr)
      (void)ucp_config_modify(config, "USE_MT_MUTEX", "y");
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
    s = ucp_init(&params, config, &context_);
    ucp_config_release(config);
    if (s != UCS_OK)
      return Status::Internal("node {}: ucp_init: {}", id_, UcsError(s));
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    // Multi-threaded: senders call UCX from their own threads (no hop to the
    // progress thread on the send path); UCX serializes them.
    wp.thread_mode = UCS_THREAD_MODE_MULTI;
    s = ucp_worker_create(context_, &wp, &worker_);
    if (s != UCS_OK) {
      return Status::Internal("node {}: ucp_worker_create: {}", id_,
                              UcsError(s));
    }
    ucp_worker_attr_t attr{};
    attr.field_mask = UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER;
    s = ucp_worker_query(worker_, &attr);
    if (s != UCS_OK) {
      return Status::Internal("node {}: ucp_worker_query: {}", id_,
                              UcsError(s));
    }
    max_am_header_ = attr.max_am_header;
    ucp_am_handler_param_t h{};
    h.field_mask =
        UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
        UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    h.id = kAmId;
    h.cb = &UcxTransport::OnMessage;
    h.arg = this;
    h.flags = UCP_AM_FLAG_WHOLE_MSG;
    s = ucp_worker_set_am_recv_handler(worker_, &h);
    if (s != UCS_OK) {
      return Status::Internal("node {}: active message handler: {}", id_,
                              UcsError(s));
    }
    s = ucp_worker_get_efd(worker_, &efd_);
    if (s != UCS_OK) {
      return Status::Internal("node {}: UCX event descriptor: {}", id_,
                              UcsError(s));
    }
    epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    if (epoll_ < 0 || ::epoll_ctl(epoll_, EPOLL_CTL_ADD, efd_, &ev) != 0) {
      return Status::IoError("node {}: epoll for UCX: {}", id_,
                             std::strerror(errno));
    }
    if (mode_ == SharedMemory::kAuto) FindLocalAddresses();
    progress_ = std::thread([this] { Progress(); });
    return Status::Ok();
  }

  NodeId node_id() const override { return id_; }

  Status Bind(const std::string& requested) override {
    ASSIGN_OR_RETURN(sockaddr_in addr, ParseEndpoint(id_, requested, true));
    if (closed_.load())
      return Status::Cancelled("node {}: transport is closed", id_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!endpoint_.empty()) {
        return Status::FailedPrecondition("node {}: already bound to {}", id_,
                                          endpoint_);
      }
    }
    const std::string host = requested.substr(
        sizeof(kScheme) - 1, requested.rfind(':') - (sizeof(kScheme) - 1));
    return CallOnProgressThread([this, addr, host, requested]() -> Status {
      if (listener_ != nullptr) {
        return Status::FailedPrecondition("node {}: already bound to {}", id_,
                                          endpoint());
      }
      sockaddr_in a = addr;
      ucp_listener_params_t lp{};
      lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
                      UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
      lp.sockaddr.addr = reinterpret_cast<const sockaddr*>(&a);
      lp.sockaddr.addrlen = sizeof(a);
      lp.conn_handler.cb = &UcxTransport::OnConnection;
      lp.conn_handler.arg = this;
      ucs_status_t s = ucp_listener_create(worker_, &lp, &listener_);
      if (s != UCS_OK) {
        listener_ = nullptr;
        return Status::Unavailable("node {}: cannot listen on {}: {}", id_,
                                   requested, UcsError(s));
      }
      ucp_listener_attr_t la{};
      la.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
      s = ucp_listener_query(listener_, &la);
      if (s != UCS_OK) {
        ucp_listener_destroy(listener_);
        listener_ = nullptr;
        return Status::Internal("node {}: listener address: {}", id_,
                                UcsError(s));
      }
      const int port =
          ntohs(reinterpret_cast<const sockaddr_in*>(&la.sockaddr)->sin_port);
      std::lock_guard<std::mutex> lock(mu_);
      endpoint_ = fmt::format("{}{}:{}", kScheme, host, port);
      return Status::Ok();
    });
  }

  std::string endpoint() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return endpoint_;
  }

  Status Connect(NodeId peer, const std::string& endpoint) override {
    if (peer < 0) {
      return Status::InvalidArgument("node {}: cannot connect to node id {}",
                                     id_, peer);
    }
    ASSIGN_OR_RETURN(sockaddr_in addr, ParseEndpoint(id_, endpoint, false));
    auto route = std::make_shared<Route>();
    route->endpoint = endpoint;
    route->addr = addr;
    route->stream = NewStreamId();
    route->shared_memory = WantsSharedMemory(addr.sin_addr);
    std::shared_ptr<Route> old;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_.load())
        return Status::Cancelled("node {}: transport is closed", id_);
      auto it = routes_.find(peer);
      if (it != routes_.end() && it->second->endpoint == endpoint &&
          !it->second->failed.load()) {
        return Status::Ok();
      }
      if (it != routes_.end()) old = std::move(it->second);
      routes_[peer] = route;
    }
    if (old && !Post([this, old] { Retire(old); })) {
      KeepForClose(std::move(old));
      return Status::Cancelled("node {}: transport is closed", id_);
    }
    return Status::Ok();
  }

  // A route that Post() could not hand to the progress thread (the
  // transport is closing): Close() retires it, since UCX may still call its
  // endpoint's error handler, which points at it.
  void KeepForClose(std::shared_ptr<Route> route) {
    std::lock_guard<std::mutex> lock(mu_);
    orphaned_.push_back(std::move(route));
  }

  Status Disconnect(NodeId peer) override {
    std::shared_ptr<Route> old;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = routes_.find(peer);
      if (it == routes_.end())
        return Status::NotFound("node {}: no route to node {}", id_, peer);
      old = std::move(it->second);
      routes_.erase(it);
    }
    if (!Post([this, old] { Retire(old); })) {
      KeepForClose(std::move(old));
      return Status::Cancelled("node {}: transport is closed", id_);
    }
    return Status::Ok();
  }

  Status Send(NodeId to, Message msg) override {
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
    std::shared_lock<std::shared_mutex> alive(life_mu_);
    if (closed_.load())
      return Status::Cancelled("node {}: transport is closed", id_);
    RETURN_IF_ERROR(StartSend(to, route, std::move(ctx)));
    messages_sent_.fetch_add(1, std::memory_order_relaxed);
    bytes_sent_.fetch_add(bytes, std::memory_order_relaxed);
    return Status::Ok();
  }

  Result<Message> Recv(milliseconds timeout) override {
    const auto deadline = Clock::now() + std::max(timeout, milliseconds(0));
    std::unique_lock<std::mutex> lock(rx_mu_);
    if (closed_.load())
      return Status::Cancelled("node {}: transport is closed", id_);
    if (endpoint().empty())
      return Status::FailedPrecondition("node {}: Recv() before Bind()", id_);
    while (true) {
      if (closed_.load())
        return Status::Cancelled("node {}: closed while receiving", id_);
      if (!ready_.empty()) {
        Message m = std::move(ready_.front());
        ready_.pop_front();
        CountReceived(m.payload_bytes());
        return m;
      }
      if (interrupted_) {
        interrupted_ = false;
        return Status::DeadlineExceeded(
            "node {}: receive at {} interrupted (Interrupt())", id_,
            endpoint());
      }
      if (Clock::now() >= deadline ||
          rx_cv_.wait_until(lock, deadline) == std::cv_status::timeout) {
        if (!ready_.empty() || closed_.load() || interrupted_) continue;
        return Status::DeadlineExceeded(
            "node {}: no message arrived at {} within {} ms", id_, endpoint(),
            timeout.count());
      }
    }
  }

  // The sink runs on the progress thread (Deliver()): a message it takes
  // costs no wake-up of another thread, and a request handled in it
  // (RpcEndpoint::SetInlineHandling) is answered from the thread that
  // drives UCX, which then sends the reply on without being signalled.
  bool SetDirectDelivery(std::function<bool(Message&)> sink) override {
    std::lock_guard<std::mutex> lock(sink_mu_);
    sink_ = std::move(sink);
    return true;
  }

  // A message handed over, by Recv() or to the direct-delivery sink.
  void CountReceived(uint64_t payload_bytes) {
    messages_received_.fetch_add(1, std::memory_order_relaxed);
    bytes_received_.fetch_add(payload_bytes, std::memory_order_relaxed);
  }

  void SetPlacement(PlacementLookup lookup) override {
    std::lock_guard<std::mutex> lock(placement_mu_);
    placement_ = std::move(lookup);
  }

  void Interrupt() override {
    std::lock_guard<std::mutex> lock(rx_mu_);
    interrupted_ = true;
    rx_cv_.notify_all();
  }

  void Close() override {
    if (closed_.exchange(true)) return;
    {
      // Wakes senders waiting for room.
      std::lock_guard<std::mutex> lock(inflight_mu_);
      inflight_cv_.notify_all();
    }
    // No sender is inside UCX after this (they check closed_ under it).
    { std::unique_lock<std::shared_mutex> wait_for_senders(life_mu_); }
    {
      std::lock_guard<std::mutex> lock(rx_mu_);
      rx_cv_.notify_all();
    }
    if (progress_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        stopping_ = true;
      }
      if (worker_ != nullptr) ucp_worker_signal(worker_);
      progress_.join();
    }
    // The progress thread is gone: this thread owns the worker now.
    if (worker_ != nullptr) {
      // No new connections or messages from here on.
      if (listener_ != nullptr) {
        DrainHandshakes();
        ucp_listener_destroy(listener_);
      }
      listener_ = nullptr;
      RunPosted();  // routes retired before the close
      std::vector<std::shared_ptr<Route>> routes;
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (auto& [peer, r] : routes_) routes.push_back(r);
        routes_.clear();
        for (auto& r : orphaned_) routes.push_back(std::move(r));
        orphaned_.clear();
      }
      for (auto& r : routes) Retire(r);
      // Gracefully: a forced close of a live connection wants peer-failure
      // handling on both sides, and these took the connecting side's mode.
      for (ucp_ep_h ep : accepted_) CloseEp(ep, /*force=*/false);
      accepted_.clear();
      // Closing requests and sends in flight, up to the linger time.
      const auto deadline = Clock::now() + options_.linger;
      while ((!close_requests_.empty() || SendsInFlight() > 0) &&
             Clock::now() < deadline) {
        ucp_worker_progress(worker_);
        ReapCloseRequests();
      }
      for (void* r : close_requests_) ucp_request_free(r);
      close_requests_.clear();
      ucp_worker_destroy(worker_);
      worker_ = nullptr;
      // Receives the worker never finished write nothing any more.
      while (!recvs_.empty()) EndRecv(*recvs_.begin());
    }
    if (context_ != nullptr) ucp_cleanup(context_);
    context_ = nullptr;
    if (epoll_ >= 0) ::close(epoll_);
    epoll_ = -1;
    streams_.clear();
  }

  // Tests only (UcxRouteInfoForTesting): UCX's description of the route
  // to `peer`, its lanes among it.
  Result<std::string> RouteInfo(NodeId peer) {
    ASSIGN_OR_RETURN(std::shared_ptr<Route> route, RouteTo(peer));
    // Owned by the call too: it may run after a timed-out wait returned.
    auto out = std::make_shared<std::string>();
    RETURN_IF_ERROR(CallOnProgressThread([this, route, peer, out]() -> Status {
      std::lock_guard<std::mutex> lock(route->mu);
      if (route->ep == nullptr) {
        return Status::FailedPrecondition(
            "node {}: the route to node {} has no endpoint yet (send first)",
            id_, peer);
      }
      char* text = nullptr;
      size_t size = 0;
      FILE* f = open_memstream(&text, &size);
      if (f == nullptr)
        return Status::IoError("node {}: open_memstream failed", id_);
      ucp_ep_print_info(route->ep, f);
      std::fclose(f);
      out->assign(text, size);
      std::free(text);
      return Status::Ok();
    }));
    return *out;
  }

  Status SendRaw(NodeId to, std::vector<uint8_t> am_header,
                 std::vector<uint8_t> data) {
    ASSIGN_OR_RETURN(std::shared_ptr<Route> route, RouteTo(to));
    auto ctx = std::make_unique<SendContext>();
    ctx->transport = this;
    ctx->header = Buffer::CopyOf(am_header.data(), am_header.size());
    if (!data.empty()) {
      ctx->payloads.push_back(Buffer::CopyOf(data.data(), data.size()));
      ctx->iov.push_back({ctx->payloads[0].data(), data.size()});
    }
    std::shared_lock<std::shared_mutex> alive(life_mu_);
    if (closed_.load())
      return Status::Cancelled("node {}: transport is closed", id_);
    return StartSend(to, route, std::move(ctx), /*raw=*/true);
  }

  TransportStats stats() const override {
    TransportStats s;
    s.messages_sent = messages_sent_.load();
    s.messages_received = messages_received_.load();
    s.payload_bytes_sent = bytes_sent_.load();
    s.payload_bytes_received = bytes_received_.load();
    s.messages_dropped = dropped_.load();
    return s;
  }

 private:
  // The route to `to`: NotFound without a Connect(), Cancelled once closed.
  Result<std::shared_ptr<Route>> RouteTo(NodeId to) {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_.load())
      return Status::Cancelled("node {}: transport is closed", id_);
    auto it = routes_.find(to);
    if (it == routes_.end()) {
      return Status::NotFound(
          "node {} has no route to node {}; Connect() first", id_, to);
    }
    return it->second;
  }

  // Runs `fn` on the progress thread, which owns the UCX worker. False
  // (and `fn` dropped) once the transport is closed.
  bool Post(std::function<void()> fn) {
    std::shared_lock<std::shared_mutex> alive(life_mu_);
    if (closed_.load()) return false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      posted_.push_back(std::move(fn));
    }
    ucp_worker_signal(worker_);
    return true;
  }

  Status CallOnProgressThread(std::function<Status()> fn) {
    auto done = std::make_shared<std::promise<Status>>();
    std::future<Status> result = done->get_future();
    if (!Post([fn = std::move(fn), done] { done->set_value(fn()); }))
      return Status::Cancelled("node {}: transport is closed", id_);
    if (result.wait_for(kCallTimeout) != std::future_status::ready) {
      return Status::DeadlineExceeded(
          "node {}: the UCX progress thread did not answer within {} ms", id_,
          kCallTimeout.count());
    }
    return result.get();
  }

  void RunPosted() {
    std::deque<std::function<void()>> work;
    {
      std::lock_guard<std::mutex> lock(mu_);
      work.swap(posted_);
    }
    for (auto& fn : work) fn();
  }

  void Progress() {
    while (true) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) break;
      }
      RunPosted();
      unsigned n = 0;
      for (int i = 0; i < 64; ++i) {
        const unsigned k = ucp_worker_progress(worker_);
        n += k;
        if (k == 0) break;
      }
      ReapCloseRequests();
      Deliver();
      if (n > 0) continue;
      const ucs_status_t armed = ucp_worker_arm(worker_);
      if (armed == UCS_ERR_BUSY) continue;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!posted_.empty() || stopping_) continue;
      }
      epoll_event ev{};
      // Bounded: the loop looks at `stopping_` at least this often.
      (void)::epoll_wait(epoll_, &ev, 1, 100);
    }
  }

  // Hands `ctx` to UCX on `route` (to node `to`). `raw`: the header is sent
  // as given (SendRawUcxForTesting), with no stream prefix written into it.
  // kUnavailable when the route is lost or was replaced, kDeadlineExceeded
  // when the sends still in flight stay above UcxOptions::max_inflight_bytes
  // for the send timeout (a stalled peer).
  Status StartSend(NodeId to, const std::shared_ptr<Route>& route,
                   std::unique_ptr<SendContext> ctx, bool raw = false) {
    const auto lost = [&](const std::string& why) {
      return Status::Unavailable(
          "node {}: node {} at {} is unreachable (UCX: {})", id_, to,
          route->endpoint, why);
    };
    if (route->failed.load()) return lost("reported it lost");
    // A send from the progress thread itself (a reply made in the
    // direct-delivery sink) does not wait for room: only that thread makes
    // room. Nor does it signal it: it drives UCX again right after.
    const bool on_progress = OnProgressThread();
    if (!on_progress) {
      std::unique_lock<std::mutex> lock(inflight_mu_);
      const bool room = inflight_cv_.wait_for(lock, options_.send_timeout, [&] {
        return closed_.load() || inflight_bytes_ == 0 ||
               inflight_bytes_ + ctx->bytes <= options_.max_inflight_bytes;
      });
      if (closed_.load())
        return Status::Cancelled("node {}: transport is closed", id_);
      if (!room) {
        return Status::DeadlineExceeded(
            "node {} -> {}: {} bytes still in flight after {} ms (peer at {} "
            "takes nothing)",
            id_, to, inflight_bytes_, options_.send_timeout.count(),
            route->endpoint);
      }
    }
    std::unique_lock<std::mutex> lock(route->mu);
    if (route->retired) {
      return Status::Unavailable(
          "node {}: the route to node {} at {} was replaced or disconnected",
          id_, to, route->endpoint);
    }
    if (route->failed.load() || !EnsureEp(*route))
      return lost("reported it lost");
    if (route->wireup != nullptr) {
      if (!AwaitWireup(*route, lock))
        return lost("the connection was not set up");
      if (route->retired || route->ep == nullptr) {
        return Status::Unavailable(
            "node {}: the route to node {} at {} was replaced or disconnected",
            id_, to, route->endpoint);
      }
    }
    if (!raw) {
      const Prefix prefix{route->stream, route->next_seq};
      std::memcpy(ctx->header.data(), &prefix, sizeof(prefix));
    }
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                     UCP_OP_ATTR_FIELD_DATATYPE;
    p.cb.send = &UcxTransport::OnSent;
    p.user_data = ctx.get();
    // One piece goes as a contiguous buffer: UCX's zero-copy rendezvous
    // takes those, while an I/O vector may be staged through copies.
    const void* buffer = nullptr;
    size_t count = 0;
    if (ctx->iov.size() == 1) {
      p.datatype = ucp_dt_make_contig(1);
      buffer = ctx->iov[0].buffer;
      count = ctx->iov[0].length;
    } else {
      // No payload bytes: an empty contiguous buffer (UCX wants a non-null
      // I/O vector).
      p.datatype = ctx->iov.empty() ? ucp_dt_make_contig(1) : ucp_dt_make_iov();
      buffer = ctx->iov.empty() ? nullptr : ctx->iov.data();
      count = ctx->iov.size();
    }
    // Counted before the call: its completion may run before it returns.
    const uint64_t bytes = ctx->bytes;
    {
      std::lock_guard<std::mutex> g(inflight_mu_);
      inflight_bytes_ += bytes;
      ++inflight_sends_;
    }
    ucs_status_ptr_t r = ucp_am_send_nbx(route->ep, kAmId, ctx->header.data(),
                                         ctx->header.size(), buffer, count, &p);
    if (UCS_PTR_IS_ERR(r)) {
      ReleaseInflight(bytes);
      const ucs_status_t why = UCS_PTR_STATUS(r);
      if (PeerGone(why)) {
        // The send found the peer lost before UCX's error callback did
        // (seen under load): the same error as after the callback.
        route->reported_lost = true;
        route->failed = true;
        return lost(UcsError(why));
      }
      return Status::Unavailable("node {}: sending to node {} at {}: {}", id_,
                                 to, route->endpoint, UcsError(why));
    }
    if (!raw) ++route->next_seq;  // taken only by a message that went out
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

  // UCX 1.13 crashes when a listener is destroyed while a connection
  // request to it is still arriving (its handler then runs on the freed
  // listener; openucx/ucx#8243, #11087). Before the listener goes, this
  // lets the handshakes under way reach OnConnection: it drives the worker
  // until nothing has happened for kHandshakeQuiet, kHandshakeDrain at most.
  // A connection that starts after that can still hit the bug.
  void DrainHandshakes() {
    const auto start = Clock::now();
    auto quiet_since = start;
    while (true) {
      const auto now = Clock::now();
      if (now - quiet_since >= kHandshakeQuiet ||
          now - start >= kHandshakeDrain)
        break;
      if (ucp_worker_progress(worker_) > 0) {
        quiet_since = Clock::now();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
  }

  void ReleaseInflight(uint64_t bytes) {
    {
      std::lock_guard<std::mutex> g(inflight_mu_);
      inflight_bytes_ -= bytes;
      --inflight_sends_;
    }
    inflight_cv_.notify_all();
  }

  int64_t SendsInFlight() {
    std::lock_guard<std::mutex> g(inflight_mu_);
    return inflight_sends_;
  }

  static void OnSent(void* request, ucs_status_t status, void* user) {
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

  static uint32_t NewStreamId() {
    static std::atomic<uint32_t> counter{0};
    static const uint32_t base = std::random_device{}();
    return base + 0x9e3779b9u * ++counter;
  }

  // Whether the calling thread is the progress thread (which owns the
  // worker between its calls into UCX, and which nothing must wait for).
  bool OnProgressThread() const {
    return std::this_thread::get_id() == progress_.get_id();
  }

  // Peer-failure handling, unless shared memory is wanted: UCX 1.13 leaves
  // out every transport that cannot report a lost peer (its shared-memory
  // and CMA transports) from endpoints that ask for it (openucx/ucx#8477).
  // Without it, a client-server endpoint still fails once its connection
  // manager's TCP connection ends (the peer closed or its process died),
  // and UCX still calls the endpoint's error handler; what it lacks is
  // UCX's keepalive, which finds a peer whose machine went silent
  // (docs/transport.md).
  static ucp_err_handling_mode_t ErrorMode(bool shared_memory) {
    return shared_memory ? UCP_ERR_HANDLING_MODE_NONE
                         : UCP_ERR_HANDLING_MODE_PEER;
  }

  // Whether a route to a peer at `peer` goes without UCX's peer-failure
  // handling (UcxOptions::shared_memory). The connecting side decides; the
  // accepting side's endpoint takes its mode (OnConnection).
  bool WantsSharedMemory(in_addr peer) const {
    switch (mode_) {
      case SharedMemory::kOn:
        return true;
      case SharedMemory::kOff:
        return false;
      case SharedMemory::kAuto:
        break;
    }
    // 0.0.0.0 (a node advertising its wildcard bind) reaches this machine.
    return (ntohl(peer.s_addr) >> 24) == 127 ||
           peer.s_addr == htonl(INADDR_ANY) ||
           local_addrs_.count(peer.s_addr) > 0;
  }

  // The IPv4 addresses of this machine's interfaces (SharedMemory::kAuto).
  void FindLocalAddresses() {
    ifaddrs* list = nullptr;
    if (::getifaddrs(&list) != 0) {
      LogWarning(
          "node {}: cannot list this machine's addresses ({}); UCX uses "
          "shared memory only towards loopback addresses",
          id_, std::strerror(errno));
      return;
    }
    for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
      if (a->ifa_addr != nullptr && a->ifa_addr->sa_family == AF_INET) {
        local_addrs_.insert(
            reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr);
      }
    }
    ::freeifaddrs(list);
  }

  bool EnsureEp(Route& route) {
    if (route.ep != nullptr) return true;
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    ep.sockaddr.addr = reinterpret_cast<const sockaddr*>(&route.addr);
    ep.sockaddr.addrlen = sizeof(route.addr);
    ep.err_mode = ErrorMode(route.shared_memory);
    // Called in either mode (ErrorMode()).
    ep.err_handler.cb = &UcxTransport::OnRouteError;
    ep.err_handler.arg = &route;
    const ucs_status_t s = ucp_ep_create(worker_, &ep, &route.ep);
    if (s != UCS_OK) {
      LogWarning("node {}: cannot reach {}: {}", id_, route.endpoint,
                 UcsError(s));
      route.ep = nullptr;
      route.failed = true;
      return false;
    }
    if (route.shared_memory && !StartWireupFlush(route)) {
      route.failed = true;
      return false;
    }
    return true;
  }

  // Without peer-failure handling (UcxOptions::shared_memory) no send goes
  // out on a new endpoint until UCX has set up its lanes: UCX 1.13 aborts
  // the process when a send queued during that set-up is moved onto the
  // shared-memory or CMA lanes (assertions in rndv.c, the packed key size,
  // and proto_am.inl, max_iov). A flush of the endpoint ends once the lanes
  // are up. `route.mu` held.
  bool StartWireupFlush(Route& route) {
    auto flush = std::make_shared<WireupFlush>();
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = [](void* request, ucs_status_t status, void* user_data) {
      std::unique_ptr<std::shared_ptr<WireupFlush>> owned(
          static_cast<std::shared_ptr<WireupFlush>*>(user_data));
      WireupFlush& f = **owned;
      {
        std::lock_guard<std::mutex> lock(f.mu);
        f.done = true;
        f.status = status;
        f.cv.notify_all();
      }
      ucp_request_free(request);
    };
    auto* owned = new std::shared_ptr<WireupFlush>(flush);
    p.user_data = owned;
    ucs_status_ptr_t r = ucp_ep_flush_nbx(route.ep, &p);
    if (r == nullptr || UCS_PTR_IS_ERR(r)) {
      delete owned;                   // no callback will come
      if (r == nullptr) return true;  // already set up
      LogWarning("node {}: setting up the connection to {}: {}", id_,
                 route.endpoint, UcsError(UCS_PTR_STATUS(r)));
      return false;
    }
    // Not done at once: the progress thread drives it.
    if (!OnProgressThread()) ucp_worker_signal(worker_);
    route.wireup = std::move(flush);
    return true;
  }

  // Waits for the route's wireup flush (StartWireupFlush) without holding
  // `lock` (route.mu) meanwhile, so that the progress thread, which ends the
  // flush, never waits for this sender (a Retire(), an inline reply to the
  // same peer). On the progress thread it drives UCX itself. Up to the send
  // timeout, or until the transport closes; false if the flush did not end
  // or failed (the route is then marked failed). `lock` held on return.
  bool AwaitWireup(Route& route, std::unique_lock<std::mutex>& lock) {
    const std::shared_ptr<WireupFlush> flush = route.wireup;
    const auto deadline = Clock::now() + options_.send_timeout;
    const bool on_progress = OnProgressThread();
    lock.unlock();
    bool done = false;
    ucs_status_t status = UCS_OK;
    while (!closed_.load() && Clock::now() < deadline) {
      if (on_progress) ucp_worker_progress(worker_);
      std::unique_lock<std::mutex> f(flush->mu);
      if (!on_progress && !flush->done)
        flush->cv.wait_for(f, std::chrono::milliseconds(50));
      if (flush->done) {
        done = true;
        status = flush->status;
        break;
      }
    }
    lock.lock();
    if (route.wireup == flush) route.wireup = nullptr;
    if (done && status == UCS_OK) return true;
    if (!closed_.load()) {
      if (!done) {
        LogWarning("node {}: the connection to {} was not set up within {} ms",
                   id_, route.endpoint, options_.send_timeout.count());
      } else {
        LogWarning("node {}: setting up the connection to {}: {}", id_,
                   route.endpoint, UcsError(status));
      }
    }
    route.failed = true;
    return false;
  }

  static void OnRouteError(void* arg, ucp_ep_h ep, ucs_status_t status) {
    auto* route = static_cast<Route*>(arg);
    route->reported_lost = true;
    g_error_handler_calls.fetch_add(1, std::memory_order_relaxed);
    if (!route->failed.exchange(true))
      LogDebug("UCX: lost the connection to {}: {}", route->endpoint,
               UcsError(status));
    (void)ep;
  }

  // Closes a route's endpoint and keeps the route: UCX may still call its
  // error handler, which points at it, until the worker is gone.
  void Retire(std::shared_ptr<Route> route) {
    CloseRoute(*route);
    closing_.push_back(std::move(route));
  }

  void CloseRoute(Route& route) {
    std::lock_guard<std::mutex> lock(route.mu);
    route.retired = true;  // a sender still holding it does not reopen it
    if (route.ep == nullptr) return;
    // A forced close of a live connection wants peer-failure handling on
    // both sides (ucp.h): without it, only one UCX reported failed.
    CloseEp(route.ep, /*force=*/route.reported_lost.load() ||
                          (route.failed.load() && !route.shared_memory));
    route.ep = nullptr;
  }

  // `force`: release the endpoint without flushing it, for an endpoint UCX
  // reported failed (a flush of one only fails, and UCX logs an error for
  // each of its lanes), or one with peer-failure handling. UCX wants
  // peer-failure handling on both sides for a forced close of a live
  // connection, so one without it is closed gracefully while it lives.
  void CloseEp(ucp_ep_h ep, bool force) {
    ucp_request_param_t p{};
    if (force) {
      p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    }
    ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &p);
    if (r != nullptr && !UCS_PTR_IS_ERR(r)) close_requests_.push_back(r);
  }

  void ReapCloseRequests() {
    for (size_t i = 0; i < close_requests_.size();) {
      if (ucp_request_check_status(close_requests_[i]) != UCS_INPROGRESS) {
        ucp_request_free(close_requests_[i]);
        close_requests_[i] = close_requests_.back();
        close_requests_.pop_back();
      } else {
        ++i;
      }
    }
  }

  static void OnConnection(ucp_conn_request_h request, void* arg) {
    auto* self = static_cast<UcxTransport*>(arg);
    ucp_ep_params_t ep{};
    // No error-handling mode of its own: the endpoint takes the connecting
    // side's (WantsSharedMemory there), as UCX requires. A different one
    // would make UCX refuse the connection (an "error handling level
    // mismatch"), e.g. for a peer that reached this node by another address
    // than it sees, or one run with another setting.
    ep.field_mask =
        UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.conn_request = request;
    ep.err_handler.cb = &UcxTransport::OnAcceptedError;
    ep.err_handler.arg = self;
    ucp_ep_h created = nullptr;
    const ucs_status_t s = ucp_ep_create(self->worker_, &ep, &created);
    if (s != UCS_OK) {
      LogWarning("node {}: refused a UCX connection: {}", self->id_,
                 UcsError(s));
      return;
    }
    self->accepted_.insert(created);
  }

  static void OnAcceptedError(void* arg, ucp_ep_h ep, ucs_status_t status) {
    auto* self = static_cast<UcxTransport*>(arg);
    g_error_handler_calls.fetch_add(1, std::memory_order_relaxed);
    LogDebug("node {}: an incoming UCX connection ended: {}", self->id_,
             UcsError(status));
    if (self->accepted_.erase(ep) > 0) self->CloseEp(ep, /*force=*/true);
  }

  // An active message: validate its header, then take its data (copied now,
  // or by rendezvous into fresh aligned buffers).
  static ucs_status_t OnMessage(void* arg, const void* header,
                                size_t header_length, void* data, size_t length,
                                const ucp_am_recv_param_t* param) {
    auto* self = static_cast<UcxTransport*>(arg);
    const bool rndv = param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV;
    Prefix prefix{};
    if (header_length < sizeof(prefix)) {
      LogWarning("node {}: dropped a UCX message with a {}-byte header",
                 self->id_, header_length);
      self->dropped_.fetch_add(1, std::memory_order_relaxed);
      return UCS_OK;
    }
    std::memcpy(&prefix, header, sizeof(prefix));
    auto decoded = wire::DecodeHeader(
        static_cast<const uint8_t*>(header) + sizeof(prefix),
        header_length - sizeof(prefix), self->options_.limits);
    Status bad;
    if (!decoded.ok()) {
      bad = decoded.status();
    } else if (decoded->payload_bytes != length) {
      bad = Status::DataLoss("header declares {} payload bytes, {} arrived",
                             decoded->payload_bytes, length);
    } else if (decoded->header.receiver != self->id_) {
      bad = Status::DataLoss("addressed to node {}", decoded->header.receiver);
    }
    // A stream is one sender's route: (sender, stream id).
    const uint64_t key =
        decoded.ok() ? (static_cast<uint64_t>(decoded->header.sender) << 32) |
                           prefix.stream
                     : 0;
    Stream* stream = nullptr;
    if (bad.ok()) {
      stream = &self->streams_[key];
      if (prefix.seq < stream->next || stream->waiting.count(prefix.seq) > 0) {
        bad = Status::DataLoss(
            "message {} of a stream from node {} came again or after the "
            "stream went on without it",
            prefix.seq, decoded->header.sender);
      }
    }
    if (!bad.ok()) {
      LogWarning("node {}: dropped a UCX message: {}", self->id_,
                 bad.message());
      self->dropped_.fetch_add(1, std::memory_order_relaxed);
      // A message from a known sender keeps its place in its stream, so the
      // later ones do not wait for it.
      if (decoded.ok() && stream == nullptr) {
        Stream& st = self->streams_[key];
        if (prefix.seq >= st.next && st.waiting.count(prefix.seq) == 0) {
          auto gap = std::make_shared<Incoming>();
          gap->failed = gap->gap = true;
          st.waiting[prefix.seq] = gap;
        }
      }
      // A rendezvous refused with an error: the sender's send fails too.
      return rndv ? UCS_ERR_INVALID_PARAM : UCS_OK;
    }
    stream->last_used = Clock::now();
    auto in = std::make_shared<Incoming>();
    in->msg.header = decoded->header;
    const std::vector<uint64_t>& sizes = decoded->payload_sizes;
    // Receive in place (placement.h): the payload a caller asked for goes
    // straight into its memory. A rendezvous writes it later, pinned until
    // then; one revoked already is received as usual.
    std::shared_ptr<PayloadPlacement> place =
        self->PlacementFor(decoded->header);
    if (place && !place->Fits(sizes)) place = nullptr;
    if (place && rndv && !place->Pin()) place = nullptr;
    const size_t placed = place ? place->payload_index() : sizes.size();
    // The others in one block, each at an aligned offset in it.
    size_t total = 0;
    std::vector<size_t> offsets;
    for (size_t i = 0; i < sizes.size(); ++i) {
      offsets.push_back(total);
      if (i != placed)
        total += (static_cast<size_t>(sizes[i]) + kAlign - 1) / kAlign * kAlign;
    }
    // Large blocks come from a pool: a fresh one would cost page faults
    // and a new UCX memory registration per message.
    auto block = std::make_shared<Buffer>(total >= BufferPool::kMinCapacity
                                              ? self->pool_->Acquire(total)
                                              : Buffer::Allocate(total));
    std::vector<ucp_dt_iov_t> iov;
    std::vector<uint8_t*> where;
    for (size_t i = 0; i < sizes.size(); ++i) {
      const size_t size = sizes[i];
      uint8_t* at = i == placed ? place->dest() : block->data() + offsets[i];
      where.push_back(at);
      if (size == 0) {
        in->msg.payloads.push_back(Buffer());
      } else if (i == placed) {
        in->msg.payloads.push_back(Buffer::Adopt(at, size, place));
      } else {
        in->msg.payloads.push_back(Buffer::Adopt(at, size, block));
      }
      if (size > 0) iov.push_back({at, size});
    }
    stream->waiting[prefix.seq] = in;
    if (!rndv) {
      const uint8_t* from = static_cast<const uint8_t*>(data);
      for (size_t i = 0; i < sizes.size(); ++i) {
        const size_t size = sizes[i];
        if (i == placed) {
          // Revoked meanwhile: that payload is delivered empty.
          if (!place->Write(0, from, size)) in->msg.payloads[i] = Buffer();
        } else if (size > 0) {
          std::memcpy(where[i], from, size);
        }
        from += size;
      }
      in->done = true;
      return UCS_OK;
    }
    // The I/O vector stays valid until the receive completes; so does the
    // pin on a placement it writes into.
    auto* rc =
        new RecvContext{in, std::move(iov), std::move(place), self, placed};
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                     UCP_OP_ATTR_FIELD_DATATYPE;
    const bool one = rc->iov.size() == 1;
    p.datatype = one ? ucp_dt_make_contig(1) : ucp_dt_make_iov();
    p.user_data = rc;
    p.cb.recv_am = [](void* request, ucs_status_t status, size_t, void* user) {
      auto* ctx = static_cast<RecvContext*>(user);
      if (status == UCS_OK) {
        ctx->in->done = true;
      } else {
        LogWarning("UCX: receiving a message's data failed: {}",
                   UcsError(status));
        ctx->in->failed = true;
      }
      ctx->self->EndRecv(ctx);
      ucp_request_free(request);
    };
    self->recvs_.insert(rc);
    ucs_status_ptr_t r = ucp_am_recv_data_nbx(
        self->worker_, data, one ? rc->iov[0].buffer : rc->iov.data(),
        one ? rc->iov[0].length : rc->iov.size(), &p);
    if (r == nullptr || UCS_PTR_IS_ERR(r)) {
      (r == nullptr ? in->done : in->failed) = true;
      self->EndRecv(rc);
    }
    return UCS_OK;
  }

  // A rendezvous receive is over (done, failed, or the worker is gone):
  // nothing writes into its buffers any more.
  void EndRecv(RecvContext* rc) {
    recvs_.erase(rc);
    // Revoked while the data came: its owner may reuse the memory as soon
    // as this unpins, so the message must not hold a view of it.
    if (rc->pinned && rc->pinned->Unpin())
      rc->in->msg.payloads[rc->placed] = Buffer();
    delete rc;
  }

  std::shared_ptr<PayloadPlacement> PlacementFor(const MessageHeader& h) {
    PlacementLookup lookup;
    {
      std::lock_guard<std::mutex> lock(placement_mu_);
      lookup = placement_;
    }
    return lookup ? lookup(h) : nullptr;
  }

  // Hands finished messages to Recv(), each stream in its send order.
  void Deliver() {
    std::vector<Message> out;
    const Clock::time_point now = Clock::now();
    for (auto& [stream, st] : streams_) {
      while (true) {
        auto it = st.waiting.find(st.next);
        if (it == st.waiting.end() && !st.waiting.empty()) {
          // A gap: give the missing message kGapTimeout, then go on.
          if (st.blocked_since == Clock::time_point{}) st.blocked_since = now;
          if (now - st.blocked_since < kGapTimeout) break;
          const uint32_t to = st.waiting.begin()->first;
          LogWarning(
              "node {}: UCX messages {}..{} of a stream never came in {} ms; "
              "going on without them",
              id_, st.next, to - 1, kGapTimeout.count());
          dropped_.fetch_add(to - st.next, std::memory_order_relaxed);
          st.next = to;
          continue;
        }
        st.blocked_since = Clock::time_point{};
        if (it == st.waiting.end() || !(it->second->done || it->second->failed))
          break;
        if (it->second->done) {
          out.push_back(std::move(it->second->msg));
        } else if (!it->second->gap) {
          dropped_.fetch_add(1, std::memory_order_relaxed);  // data lost
        }
        st.waiting.erase(it);
        ++st.next;
      }
    }
    if (now - last_prune_ > kPruneEvery) {
      // Streams of routes that went away (a peer replaced or reconnected).
      last_prune_ = now;
      for (auto it = streams_.begin(); it != streams_.end();) {
        if (it->second.waiting.empty() &&
            now - it->second.last_used > kIdleStream) {
          it = streams_.erase(it);
        } else {
          ++it;
        }
      }
    }
    if (out.empty()) return;
    // Direct delivery (SetDirectDelivery): offered in order, until the sink
    // declines one; that one and every later message are queued, and
    // nothing is offered while the queue holds any, so that no message
    // overtakes one that Recv() has still to return.
    size_t taken = 0;
    {
      std::lock_guard<std::mutex> sink_lock(sink_mu_);
      bool queue_empty = false;
      if (sink_) {
        std::lock_guard<std::mutex> lock(rx_mu_);
        queue_empty = ready_.empty();
      }
      for (; queue_empty && taken < out.size(); ++taken) {
        const uint64_t bytes = out[taken].payload_bytes();
        if (!sink_(out[taken])) break;
        CountReceived(bytes);
      }
    }
    if (taken == out.size()) return;
    std::lock_guard<std::mutex> lock(rx_mu_);
    for (size_t i = taken; i < out.size(); ++i)
      ready_.push_back(std::move(out[i]));
    rx_cv_.notify_all();
  }

  const NodeId id_;
  const UcxOptions options_;
  // Which endpoints go without peer-failure handling, so that UCX may pick
  // shared memory and CMA (UcxOptions::shared_memory; WantsSharedMemory).
  const SharedMemory mode_;
  std::set<in_addr_t> local_addrs_;  // this machine's, filled by Init()
  const std::shared_ptr<BufferPool> pool_ =
      BufferPool::Create(size_t{256} << 20);
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_listener_h listener_ = nullptr;
  size_t max_am_header_ = 0;
  int efd_ = -1;
  int epoll_ = -1;
  std::thread progress_;
  std::atomic<bool> closed_{false};
  std::shared_mutex life_mu_;  // senders inside UCX hold it shared

  mutable std::mutex mu_;
  std::string endpoint_;                             // Guarded by mu_.
  std::map<NodeId, std::shared_ptr<Route>> routes_;  // Guarded by mu_.
  std::vector<std::shared_ptr<Route>> orphaned_;     // Guarded by mu_.
  std::deque<std::function<void()>> posted_;         // Guarded by mu_.
  bool stopping_ = false;                            // Guarded by mu_.

  // Progress thread only.
  std::set<ucp_ep_h> accepted_;
  std::vector<std::shared_ptr<Route>> closing_;
  std::vector<void*> close_requests_;
  struct Stream {
    uint32_t next = 0;  // the sequence number delivered next
    std::map<uint32_t, std::shared_ptr<Incoming>> waiting;
    Clock::time_point last_used = Clock::now();
    // Since when later messages wait for `next` (which may never come:
    // its sender failed to send it).
    Clock::time_point blocked_since{};
  };
  std::map<uint64_t, Stream> streams_;  // by (sender << 32 | stream id)
  std::set<RecvContext*> recvs_;        // rendezvous receives in flight
  Clock::time_point last_prune_ = Clock::now();
  // Payload bytes of sends UCX has not finished (back-pressure).
  std::mutex inflight_mu_;
  std::condition_variable inflight_cv_;
  uint64_t inflight_bytes_ = 0;  // Guarded by inflight_mu_.
  int64_t inflight_sends_ = 0;   // Guarded by inflight_mu_.

  std::mutex placement_mu_;
  PlacementLookup placement_;  // Guarded by placement_mu_.

  std::mutex rx_mu_;
  std::condition_variable rx_cv_;
  std::deque<Message> ready_;           // Guarded by rx_mu_.
  bool interrupted_ = false;            // Guarded by rx_mu_.
  std::mutex sink_mu_;                  // held while the sink runs
  std::function<bool(Message&)> sink_;  // Guarded by sink_mu_.

  std::atomic<uint64_t> messages_sent_{0}, messages_received_{0},
      bytes_sent_{0}, bytes_received_{0}, dropped_{0};
};

}  // namespace

bool HaveUcx() { return true; }

Status SendRawUcxForTesting(Transport& from, NodeId to,
                            std::vector<uint8_t> am_header,
                            std::vector<uint8_t> data) {
  auto* ucx = dynamic_cast<UcxTransport*>(&from);
  if (ucx == nullptr)
    return Status::InvalidArgument("SendRawUcxForTesting: not a UCX transport");
  return ucx->SendRaw(to, std::move(am_header), std::move(data));
}

uint64_t UcxErrorHandlerCallsForTesting() {
  return g_error_handler_calls.load();
}

Result<std::string> UcxRouteInfoForTesting(Transport& from, NodeId to) {
  auto* ucx = dynamic_cast<UcxTransport*>(&from);
  if (ucx == nullptr) {
    return Status::InvalidArgument(
        "UcxRouteInfoForTesting: not a UCX transport");
  }
  return ucx->RouteInfo(to);
}

Result<std::unique_ptr<Transport>> NewUcxTransport(NodeId id,
                                                   UcxOptions options) {
  if (id < 0)
    return Status::InvalidArgument("UCX transport for node id {}", id);
  // UcxOptions::shared_memory left unset: the environment says.
  if (const char* env = std::getenv(kSharedMemoryEnv);
      !options.shared_memory.has_value() && env != nullptr) {
    options.shared_memory = UcxSharedMemoryFromEnv(env);
    if (!options.shared_memory.has_value()) {
      return Status::InvalidArgument(
          "node {}: {}=\"{}\": expected auto (shared memory towards this "
          "machine's addresses), 1 (towards every peer) or 0 (never)",
          id, kSharedMemoryEnv, env);
    }
  }
  auto t = std::make_unique<UcxTransport>(id, std::move(options));
  RETURN_IF_ERROR(t->Init());
  return std::unique_ptr<Transport>(std::move(t));
}

}  // namespace strata

#else  // !STRATA_HAVE_UCX

namespace strata {

bool HaveUcx() { return false; }

Status SendRawUcxForTesting(Transport&, NodeId, std::vector<uint8_t>,
                            std::vector<uint8_t>) {
  return Status::Unimplemented("this build has no UCX");
}

Result<std::string> UcxRouteInfoForTesting(Transport&, NodeId) {
  return Status::Unimplemented("this build has no UCX");
}

uint64_t UcxErrorHandlerCallsForTesting() { return 0; }

Result<std::unique_ptr<Transport>> NewUcxTransport(NodeId id, UcxOptions) {
  return Status::Unimplemented(
      "node {}: this build has no UCX (install libucx-dev, which "
      "scripts/setup.sh does, and configure again)",
      id);
}

}  // namespace strata

#endif
