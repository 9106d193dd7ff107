// Endpoints and connection set-up of a UcxTransport: the listener (Bind),
// the routes to peers (Connect, Disconnect) and their UCX endpoints, the
// wireup flush of endpoints without peer-failure handling, endpoints that
// peers opened to this node, and closing all of them.

#include <arpa/inet.h>
#include <netdb.h>

#include <cstdio>
#include <cstdlib>

#include "common/log.h"
#include "transport/ucx/transport_impl.h"

namespace strata::ucx {
namespace {

using std::chrono::milliseconds;

// Close(): how long connection handshakes under way get to finish before
// the listener goes (DrainHandshakes).
constexpr milliseconds kHandshakeQuiet{50};
constexpr milliseconds kHandshakeDrain{500};

}  // namespace

std::atomic<uint64_t> g_error_handler_calls{0};

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

Status UcxTransport::Bind(const std::string& requested) {
  ASSIGN_OR_RETURN(sockaddr_in addr, ParseEndpoint(id_, requested, true));
  if (closed_.load())
    return Status::Cancelled("node {}: transport is closed", id_);
  {
    MutexLock lock(&mu_);
    if (!endpoint_.empty()) {
      return Status::FailedPrecondition("node {}: already bound to {}", id_,
                                        endpoint_);
    }
  }
  const std::string host = requested.substr(
      sizeof(kScheme) - 1, requested.rfind(':') - (sizeof(kScheme) - 1));
  return CallOnProgressThread([this, addr, host, requested]() -> Status {
    return Listen(addr, host, requested);
  });
}

// On the progress thread, which owns the listener.
Status UcxTransport::Listen(const sockaddr_in& addr, const std::string& host,
                            const std::string& requested) {
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
    return Status::Internal("node {}: listener address: {}", id_, UcsError(s));
  }
  const int port =
      ntohs(reinterpret_cast<const sockaddr_in*>(&la.sockaddr)->sin_port);
  MutexLock lock(&mu_);
  endpoint_ = fmt::format("{}{}:{}", kScheme, host, port);
  return Status::Ok();
}

std::string UcxTransport::endpoint() const {
  MutexLock lock(&mu_);
  return endpoint_;
}

Status UcxTransport::Connect(NodeId peer, const std::string& endpoint) {
  if (peer < 0) {
    return Status::InvalidArgument("node {}: cannot connect to node id {}", id_,
                                   peer);
  }
  ASSIGN_OR_RETURN(sockaddr_in addr, ParseEndpoint(id_, endpoint, false));
  auto route = std::make_shared<Route>();
  route->endpoint = endpoint;
  route->addr = addr;
  route->stream = NewStreamId();
  route->shared_memory = WantsSharedMemory(addr.sin_addr);
  std::shared_ptr<Route> old;
  {
    MutexLock lock(&mu_);
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

void UcxTransport::KeepForClose(std::shared_ptr<Route> route) {
  MutexLock lock(&mu_);
  orphaned_.push_back(std::move(route));
}

Status UcxTransport::Disconnect(NodeId peer) {
  std::shared_ptr<Route> old;
  {
    MutexLock lock(&mu_);
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

Result<std::shared_ptr<Route>> UcxTransport::RouteTo(NodeId to) {
  MutexLock lock(&mu_);
  if (closed_.load())
    return Status::Cancelled("node {}: transport is closed", id_);
  auto it = routes_.find(to);
  if (it == routes_.end()) {
    return Status::NotFound("node {} has no route to node {}; Connect() first",
                            id_, to);
  }
  return it->second;
}

Result<std::string> UcxTransport::RouteInfo(NodeId peer) {
  ASSIGN_OR_RETURN(std::shared_ptr<Route> route, RouteTo(peer));
  // Owned by the call too: it may run after a timed-out wait returned.
  auto out = std::make_shared<std::string>();
  RETURN_IF_ERROR(CallOnProgressThread([this, route, peer, out]() -> Status {
    MutexLock lock(&route->mu);
    if (route->ep == nullptr) {
      return Status::FailedPrecondition(
          "node {}: the route to node {} has no endpoint yet (send first)", id_,
          peer);
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

bool UcxTransport::EnsureEp(Route& route) {
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
// are up.
bool UcxTransport::StartWireupFlush(Route& route) {
  auto flush = std::make_shared<WireupFlush>();
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = [](void* request, ucs_status_t status, void* user_data) {
    std::unique_ptr<std::shared_ptr<WireupFlush>> owned(
        static_cast<std::shared_ptr<WireupFlush>*>(user_data));
    WireupFlush& f = **owned;
    {
      MutexLock lock(&f.mu);
      f.done = true;
      f.status = status;
      f.cv.SignalAll();
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
// route.mu meanwhile, so that the progress thread, which ends the flush,
// never waits for this sender (a Retire(), an inline reply to the same
// peer). On the progress thread it drives UCX itself. Up to the send
// timeout, or until the transport closes; false if the flush did not end
// or failed (the route is then marked failed). route.mu held again on
// return.
bool UcxTransport::AwaitWireup(Route& route) {
  const std::shared_ptr<WireupFlush> flush = route.wireup;
  const auto deadline = Clock::now() + options_.send_timeout;
  const bool on_progress = OnProgressThread();
  route.mu.Unlock();
  bool done = false;
  ucs_status_t status = UCS_OK;
  while (!closed_.load() && Clock::now() < deadline) {
    if (on_progress) ucp_worker_progress(worker_);
    MutexLock f(&flush->mu);
    if (!on_progress && !flush->done)
      (void)flush->cv.WaitFor(std::chrono::milliseconds(50));
    if (flush->done) {
      done = true;
      status = flush->status;
      break;
    }
  }
  route.mu.Lock();
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

void UcxTransport::OnRouteError(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* route = static_cast<Route*>(arg);
  route->reported_lost = true;
  g_error_handler_calls.fetch_add(1, std::memory_order_relaxed);
  if (!route->failed.exchange(true))
    LogDebug("UCX: lost the connection to {}: {}", route->endpoint,
             UcsError(status));
  (void)ep;
}

void UcxTransport::Retire(std::shared_ptr<Route> route) {
  CloseRoute(*route);
  closing_.push_back(std::move(route));
}

void UcxTransport::CloseRoute(Route& route) {
  MutexLock lock(&route.mu);
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
void UcxTransport::CloseEp(ucp_ep_h ep, bool force) {
  ucp_request_param_t p{};
  if (force) {
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
  }
  ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &p);
  if (r != nullptr && !UCS_PTR_IS_ERR(r)) close_requests_.push_back(r);
}

void UcxTransport::ReapCloseRequests() {
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

// UCX 1.13 crashes when a listener is destroyed while a connection
// request to it is still arriving (its handler then runs on the freed
// listener; openucx/ucx#8243, #11087). Before the listener goes, this
// lets the handshakes under way reach OnConnection: it drives the worker
// until nothing has happened for kHandshakeQuiet, kHandshakeDrain at most.
// A connection that starts after that can still hit the bug.
void UcxTransport::DrainHandshakes() {
  const auto start = Clock::now();
  auto quiet_since = start;
  while (true) {
    const auto now = Clock::now();
    if (now - quiet_since >= kHandshakeQuiet || now - start >= kHandshakeDrain)
      break;
    if (ucp_worker_progress(worker_) > 0) {
      quiet_since = Clock::now();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
}

void UcxTransport::OnConnection(ucp_conn_request_h request, void* arg) {
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
    LogWarning("node {}: refused a UCX connection: {}", self->id_, UcsError(s));
    return;
  }
  self->accepted_.insert(created);
}

void UcxTransport::OnAcceptedError(void* arg, ucp_ep_h ep,
                                   ucs_status_t status) {
  auto* self = static_cast<UcxTransport*>(arg);
  g_error_handler_calls.fetch_add(1, std::memory_order_relaxed);
  LogDebug("node {}: an incoming UCX connection ended: {}", self->id_,
           UcsError(status));
  if (self->accepted_.erase(ep) > 0) self->CloseEp(ep, /*force=*/true);
}

}  // namespace strata::ucx
