// The UCP context and worker of a UcxTransport, the progress thread that
// drives them, work posted to that thread, and Close().

#include <sys/epoll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <future>

#include "transport/ucx/transport_impl.h"

namespace strata::ucx {
namespace {

using std::chrono::milliseconds;

// How long a call made on the progress thread (Bind) may take.
constexpr milliseconds kCallTimeout{10000};

}  // namespace

UcxTransport::UcxTransport(NodeId id, UcxOptions options)
    : id_(id),
      options_(std::move(options)),
      mode_(options_.shared_memory.value_or(SharedMemory::kAuto)) {}

UcxTransport::~UcxTransport() { Close(); }

Status UcxTransport::Init() {
  RETURN_IF_ERROR(CreateWorker());
  RETURN_IF_ERROR(WatchWorker());
  if (mode_ == SharedMemory::kAuto) FindLocalAddresses();
  progress_ = std::thread([this] { Progress(); });
  return Status::Ok();
}

Status UcxTransport::CreateWorker() {
  ucp_config_t* config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK) {
    return Status::Internal("node {}: UCX configuration: {}", id_, UcsError(s));
  }
  // Messages below 512 KiB go eagerly (copied through UCX's buffers)
  // instead of by rendezvous, whose extra round trip of wake-ups cost
  // more than the copies for LeNet's 177 KB pushes on 2 vCPUs
  // (docs/design/transport.md). UCX_RNDV_THRESH in the environment wins.
  if (std::getenv("UCX_RNDV_THRESH") == nullptr)
    (void)ucp_config_modify(config, "RNDV_THRESH", "512kb");
  // The worker is shared by the senders' threads and the progress thread
  // (multi-thread mode below). UCX guards it with a spinlock unless told
  // otherwise; with more threads than cores, a holder that is descheduled
  // keeps the others spinning for their whole time slice. A mutex sleeps
  // instead: ps_bench 2+2 at 1 MiB on 2 vCPUs, pulls 0.27 -> 0.35x raw and
  // pushes 0.46 -> 0.64x (docs/design/transport.md). UCX_USE_MT_MUTEX in the
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
    return Status::Internal("node {}: ucp_worker_create: {}", id_, UcsError(s));
  }
  ucp_worker_attr_t attr{};
  attr.field_mask = UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER;
  s = ucp_worker_query(worker_, &attr);
  if (s != UCS_OK) {
    return Status::Internal("node {}: ucp_worker_query: {}", id_, UcsError(s));
  }
  max_am_header_ = attr.max_am_header;
  return Status::Ok();
}

// The active-message handler, and the worker's event descriptor in an
// epoll set the idle progress thread sleeps on.
Status UcxTransport::WatchWorker() {
  ucp_am_handler_param_t h{};
  h.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                 UCP_AM_HANDLER_PARAM_FIELD_ARG |
                 UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
  h.id = kAmId;
  h.cb = &UcxTransport::OnMessage;
  h.arg = this;
  h.flags = UCP_AM_FLAG_WHOLE_MSG;
  ucs_status_t s = ucp_worker_set_am_recv_handler(worker_, &h);
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
  return Status::Ok();
}

bool UcxTransport::Post(std::function<void()> fn) {
  ReaderMutexLock alive(&life_mu_);
  if (closed_.load()) return false;
  {
    MutexLock lock(&mu_);
    posted_.push_back(std::move(fn));
  }
  ucp_worker_signal(worker_);
  return true;
}

Status UcxTransport::CallOnProgressThread(std::function<Status()> fn) {
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

void UcxTransport::RunPosted() {
  std::deque<std::function<void()>> work;
  {
    MutexLock lock(&mu_);
    work.swap(posted_);
  }
  for (auto& fn : work) fn();
}

void UcxTransport::Progress() {
  while (true) {
    {
      MutexLock lock(&mu_);
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
      MutexLock lock(&mu_);
      if (!posted_.empty() || stopping_) continue;
    }
    epoll_event ev{};
    // Bounded: the loop looks at `stopping_` at least this often.
    (void)::epoll_wait(epoll_, &ev, 1, 100);
  }
}

void UcxTransport::Close() {
  if (closed_.exchange(true)) return;
  {
    // Wakes senders waiting for room.
    MutexLock lock(&inflight_mu_);
    inflight_cv_.SignalAll();
  }
  // No sender is inside UCX after this (they check closed_ under it).
  { WriterMutexLock wait_for_senders(&life_mu_); }
  {
    MutexLock lock(&rx_mu_);
    rx_cv_.SignalAll();
  }
  if (progress_.joinable()) {
    {
      MutexLock lock(&mu_);
      stopping_ = true;
    }
    if (worker_ != nullptr) ucp_worker_signal(worker_);
    progress_.join();
  }
  // The progress thread is gone: this thread owns the worker now.
  if (worker_ != nullptr) ShutDownWorker();
  if (context_ != nullptr) ucp_cleanup(context_);
  context_ = nullptr;
  if (epoll_ >= 0) ::close(epoll_);
  epoll_ = -1;
  streams_.clear();
}

void UcxTransport::ShutDownWorker() {
  // No new connections or messages from here on.
  if (listener_ != nullptr) {
    DrainHandshakes();
    ucp_listener_destroy(listener_);
  }
  listener_ = nullptr;
  RunPosted();  // routes retired before the close
  std::vector<std::shared_ptr<Route>> routes;
  {
    MutexLock lock(&mu_);
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

TransportStats UcxTransport::stats() const {
  TransportStats s;
  s.messages_sent = messages_sent_.load();
  s.messages_received = messages_received_.load();
  s.payload_bytes_sent = bytes_sent_.load();
  s.payload_bytes_received = bytes_received_.load();
  s.messages_dropped = dropped_.load();
  return s;
}

}  // namespace strata::ucx
