#include "transport/zmq/zap_handler.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <zmq.hpp>

#include "common/log.h"
#include "transport/zmq/curve_keys.h"

namespace strata {
namespace {

constexpr char kZapEndpoint[] = "inproc://zeromq.zap.01";
constexpr char kZapVersion[] = "1.0";
// Refused keys logged per domain; beyond this many distinct keys (someone
// trying keys at random) refusals are only counted, so the log stays small.
constexpr size_t kMaxLoggedKeys = 256;

std::string Z85(const std::string& binary_key) {
  char text[41] = {};
  if (binary_key.size() != 32 ||
      zmq_z85_encode(text, reinterpret_cast<const uint8_t*>(binary_key.data()),
                     binary_key.size()) == nullptr) {
    return fmt::format("<{} bytes>", binary_key.size());
  }
  return text;
}

}  // namespace

Result<std::unique_ptr<ZapHandler>> ZapHandler::Start(zmq::context_t& context) {
  std::unique_ptr<zmq::socket_t> socket;
  try {
    socket = std::make_unique<zmq::socket_t>(context, zmq::socket_type::rep);
    socket->set(zmq::sockopt::linger, 0);
    socket->bind(kZapEndpoint);
  } catch (const zmq::error_t& e) {
    if (e.num() == EADDRINUSE) {
      return Status::Unavailable(
          "cannot serve CURVE authentication: another ZAP handler is bound at "
          "{} in this ZeroMQ context",
          kZapEndpoint);
    }
    return Status::Internal("cannot serve CURVE authentication at {}: {}",
                            kZapEndpoint, e.what());
  }
  const int wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd < 0) {
    return Status::Internal("cannot serve CURVE authentication: eventfd: {}",
                            std::strerror(errno));
  }
  std::unique_ptr<ZapHandler> handler(
      new ZapHandler(std::move(socket), wake_fd));
  // The socket was made on this thread; starting the thread is the memory
  // barrier ZeroMQ asks for when a socket moves to another thread.
  handler->thread_ = std::thread([h = handler.get()] { h->Serve(); });
  return handler;
}

ZapHandler::ZapHandler(std::unique_ptr<zmq::socket_t> socket, int wake_fd)
    : socket_(std::move(socket)), wake_fd_(wake_fd) {}

ZapHandler::~ZapHandler() {
  stop_.store(true);
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  ::close(wake_fd_);
  // socket_ closes here, after the thread let go of it.
}

Result<std::string> ZapHandler::Register(
    const std::vector<std::string>& allowed, const std::string& who,
    std::shared_ptr<std::atomic<uint64_t>> refused) {
  Domain d;
  for (const std::string& key : allowed) {
    RETURN_IF_ERROR(CheckCurveKey(key, who + ": allowed CURVE client key"));
    uint8_t binary[32];
    zmq_z85_decode(binary, key.c_str());
    d.allowed.emplace(reinterpret_cast<const char*>(binary), sizeof(binary));
  }
  d.who = who;
  d.refused = std::move(refused);
  MutexLock lock(&mu_);
  std::string name = fmt::format("strata-{}", next_domain_++);
  domains_.emplace(name, std::move(d));
  return name;
}

void ZapHandler::Unregister(const std::string& domain) {
  MutexLock lock(&mu_);
  domains_.erase(domain);
}

std::vector<std::string> ZapHandler::Answer(
    const std::vector<std::string>& request) {
  // request: version, request id, domain, address, identity, mechanism,
  // credentials...
  if (request.size() < 6 || request[0] != kZapVersion) {
    return {"500", "malformed ZAP request"};
  }
  const std::string& domain = request[2];
  const std::string& address = request[3];
  const std::string& mechanism = request[5];
  MutexLock lock(&mu_);
  auto it = domains_.find(domain);
  if (it == domains_.end()) {
    // A server that is closing, or a socket strata did not configure.
    return {"400", "unknown ZAP domain"};
  }
  Domain& d = it->second;
  // Each refusal is logged before it is counted, so whoever sees the count
  // (stats().connections_refused) finds the log line written. Counts change
  // only here, under mu_.
  if (mechanism != "CURVE" || request.size() != 7) {
    if (d.logged.insert("mechanism " + mechanism).second) {
      LogWarning("{}: refused a peer from {}: mechanism {} (want CURVE)", d.who,
                 address, mechanism);
    }
    d.refused->fetch_add(1, std::memory_order_release);
    return {"400", "CURVE only"};
  }
  const std::string& key = request[6];
  if (d.allowed.count(key) != 0) return {"200", "OK"};
  const uint64_t n = d.refused->load(std::memory_order_relaxed) + 1;
  if (d.logged.size() < kMaxLoggedKeys && d.logged.insert(key).second) {
    LogWarning(
        "{}: refused a CURVE client from {}: its public key {} is not this "
        "cluster's (wrong cluster.key?); {} refusal(s) so far, each key is "
        "logged once",
        d.who, address, Z85(key), n);
  }
  d.refused->fetch_add(1, std::memory_order_release);
  return {"400", "key not allowed"};
}

void ZapHandler::Serve() {
  zmq::socket_t& s = *socket_;
  while (!stop_.load()) {
    zmq_pollitem_t items[2] = {{s.handle(), 0, ZMQ_POLLIN, 0},
                               {nullptr, wake_fd_, ZMQ_POLLIN, 0}};
    if (zmq_poll(items, 2, -1) < 0) {
      if (zmq_errno() == ETERM) return;
      continue;  // EINTR
    }
    if (!(items[0].revents & ZMQ_POLLIN)) continue;
    try {
      std::vector<std::string> request;
      zmq::message_t part;
      if (!s.recv(part, zmq::recv_flags::dontwait)) continue;
      request.emplace_back(part.data<char>(), part.size());
      while (part.more()) {
        if (!s.recv(part, zmq::recv_flags::none)) break;
        request.emplace_back(part.data<char>(), part.size());
      }
      const std::vector<std::string> answer = Answer(request);
      // A REP socket must answer every request, even a malformed one.
      const std::string request_id = request.size() > 1 ? request[1] : "";
      const std::string reply[] = {kZapVersion, request_id, answer[0],
                                   answer[1],   "",         ""};
      for (size_t i = 0; i < 6; ++i) {
        s.send(zmq::buffer(reply[i]),
               i + 1 < 6 ? zmq::send_flags::sndmore : zmq::send_flags::none);
      }
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) return;
      LogWarning("CURVE authentication (ZAP): {}", e.what());
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

}  // namespace strata
