#include "transport/factory.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/log.h"

namespace strata {
namespace {

enum class Backend { kInProc, kZmq, kUcx };

// The backend an endpoint's scheme names, if any.
std::optional<Backend> BackendOf(std::string_view endpoint) {
  const auto starts = [&](std::string_view scheme) {
    return endpoint.size() > scheme.size() &&
           endpoint.substr(0, scheme.size()) == scheme;
  };
  if (starts("inproc://")) return Backend::kInProc;
  if (starts("tcp://") || starts("ipc://")) return Backend::kZmq;
  if (starts("ucx://")) return Backend::kUcx;
  return std::nullopt;
}

const char* BackendName(Backend backend) {
  switch (backend) {
    case Backend::kInProc:
      return "in-process";
    case Backend::kZmq:
      return "ZeroMQ";
    case Backend::kUcx:
      return "UCX";
  }
  return "unknown";
}

Status NoSuchBackend(NodeId id, const std::string& endpoint) {
  return Status::InvalidArgument(
      "node {}: '{}' names no transport: want inproc://NAME, "
      "tcp://HOST:PORT, ipc://PATH or ucx://HOST:PORT",
      id, endpoint);
}

// The IPv4 address of `host` (a name or a dotted address).
Result<std::string> Resolve(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0 || found == nullptr) {
    return Status::NotFound("cannot resolve host '{}': {}", host,
                            ::gai_strerror(rc));
  }
  char text[INET_ADDRSTRLEN] = {};
  const auto* in = reinterpret_cast<const sockaddr_in*>(found->ai_addr);
  ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
  ::freeaddrinfo(found);
  return std::string(text);
}

// The local address this machine uses to reach `host`:`port` (the route's
// source address; a UDP connect sends nothing).
Result<std::string> LocalAddressToward(const std::string& host,
                                       const std::string& port) {
  ASSIGN_OR_RETURN(std::string ip, Resolve(host));
  sockaddr_in peer{};
  peer.sin_family = AF_INET;
  peer.sin_port = htons(static_cast<uint16_t>(std::atoi(port.c_str())));
  ::inet_pton(AF_INET, ip.c_str(), &peer.sin_addr);
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) return Status::IoError("socket: {}", std::strerror(errno));
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  const bool ok =
      ::connect(fd, reinterpret_cast<const sockaddr*>(&peer), sizeof(peer)) ==
          0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) {
    return Status::Unavailable("no route from this machine to {} ({}): {}",
                               host, ip, std::strerror(err));
  }
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text));
  return std::string(text);
}

bool IsLoopbackHost(const std::string& host) {
  return host.rfind("127.", 0) == 0 || host == "localhost" || host == "::1" ||
         host == "[::1]";
}

// Only ZeroMQ has authentication (CURVE); no peer outside this process
// reaches the in-process transport anyway.
Status CheckCurve(NodeId id, const std::string& endpoint, Backend backend,
                  const TransportOptions& options) {
  if (!options.curve || backend == Backend::kZmq) return Status::Ok();
  if (backend == Backend::kUcx) {
    return Status::InvalidArgument(
        "node {}: CURVE (cluster.security = \"curve\") secures ZeroMQ's "
        "tcp:// and ipc://; the UCX transport ({}) has no authentication: "
        "use tcp:// with CURVE, or security = \"none\"",
        id, endpoint);
  }
  return Status::InvalidArgument(
      "node {}: CURVE (cluster.security = \"curve\") authenticates and "
      "encrypts ZeroMQ's tcp:// and ipc://, but {} is the in-process "
      "transport, which no peer outside this process can reach: use tcp:// "
      "(CURVE on loopback; cluster.transport = \"tcp\"), or security = "
      "\"none\"",
      id, endpoint);
}

// Every node of a cluster speaks one transport.
Status CheckKnownPeer(NodeId id, const std::string& endpoint, Backend backend,
                      const std::string& peer) {
  if (peer.empty()) return Status::Ok();
  const std::optional<Backend> theirs = BackendOf(peer);
  if (!theirs) {
    return Status::InvalidArgument(
        "node {} binding {}: its peer's address '{}' names no transport", id,
        endpoint, peer);
  }
  if (*theirs != backend) {
    return Status::InvalidArgument(
        "node {}: binds {} ({}) but its peer is at {} ({}): every node of a "
        "cluster speaks the same transport",
        id, endpoint, BackendName(backend), peer, BackendName(*theirs));
  }
  return Status::Ok();
}

Status BindOrSay(NodeId id, const std::string& endpoint, Transport& t) {
  Status st = t.Bind(endpoint);
  if (!st.ok())
    return st.WithContext(fmt::format("node {} binding {}", id, endpoint));
  return Status::Ok();
}

// Without CURVE, a node that listens or advertises beyond loopback says so.
void WarnIfOpen(NodeId id, const std::string& endpoint, const Transport& t) {
  std::string host, port, advertised;
  if (SplitTcpEndpoint(t.endpoint(), &advertised, &port) &&
      SplitTcpEndpoint(endpoint, &host, &port) &&
      (!IsLoopbackHost(host) || !IsLoopbackHost(advertised))) {
    LogWarning(
        "node {} listens at {} ({}) without authentication or encryption: "
        "anyone who reaches that port can push gradients into the model or "
        "stop the run. Set cluster.security = \"curve\" "
        "(docs/design/cluster.md, Security)",
        id, endpoint, t.endpoint());
  }
}

Result<std::unique_ptr<Transport>> NewZmqNode(NodeId id,
                                              const std::string& endpoint,
                                              const TransportOptions& options) {
  ZmqOptions zo;
  zo.context = options.zmq_context;
  zo.curve = options.curve;
  zo.advertise_host = options.advertise_host;
  std::string host, port, peer_host, peer_port;
  if (zo.advertise_host.empty() && SplitTcpEndpoint(endpoint, &host, &port) &&
      IsWildcardHost(host) &&
      SplitTcpEndpoint(options.known_peer, &peer_host, &peer_port)) {
    Result<std::string> local = LocalAddressToward(peer_host, peer_port);
    if (!local.ok()) {
      return local.status().WithContext(fmt::format(
          "node {} binding {}: finding the address peers reach", id, endpoint));
    }
    zo.advertise_host = *local;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Transport> t, NewZmqTransport(id, zo));
  RETURN_IF_ERROR(BindOrSay(id, endpoint, *t));
  if (!options.curve) WarnIfOpen(id, endpoint, *t);
  return t;
}

}  // namespace

namespace {

// The backend's transport, bound.
Result<std::unique_ptr<Transport>> NewBackendTransport(
    NodeId id, const std::string& endpoint, const TransportOptions& options) {
  const std::optional<Backend> backend = BackendOf(endpoint);
  if (!backend) return NoSuchBackend(id, endpoint);
  RETURN_IF_ERROR(CheckKnownPeer(id, endpoint, *backend, options.known_peer));
  RETURN_IF_ERROR(CheckCurve(id, endpoint, *backend, options));
  std::unique_ptr<Transport> t;
  switch (*backend) {
    case Backend::kInProc: {
      if (options.fabric == nullptr) {
        return Status::InvalidArgument(
            "node {}: {} needs the in-process fabric its peers are on "
            "(TransportOptions::fabric)",
            id, endpoint);
      }
      ASSIGN_OR_RETURN(t, options.fabric->NewTransport(id));
      break;
    }
    case Backend::kUcx: {
      UcxOptions uo;
      uo.shared_memory = options.ucx_shared_memory;
      ASSIGN_OR_RETURN(t, NewUcxTransport(id, uo));
      break;
    }
    case Backend::kZmq:
      return NewZmqNode(id, endpoint, options);
  }
  RETURN_IF_ERROR(BindOrSay(id, endpoint, *t));
  return t;
}

}  // namespace

Result<std::unique_ptr<Transport>> NewBoundTransport(
    NodeId id, const std::string& endpoint, const TransportOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<Transport> t,
                   NewBackendTransport(id, endpoint, options));
  if (!options.links) return t;
  ShapedOptions shaped;
  shaped.links = options.links;
  // Each node its own jitter.
  shaped.seed = options.link_seed * 1000003 + static_cast<uint64_t>(id);
  return NewShapedTransport(std::move(t), std::move(shaped));
}

Result<std::string> LocalEndpoint(std::string_view transport) {
  if (transport == "inproc") return std::string("inproc://*");
  if (transport == "tcp") return std::string("tcp://127.0.0.1:*");
  if (transport == "ipc") return std::string("ipc://*");
  if (transport == "ucx") return std::string("ucx://127.0.0.1:*");
  return Status::InvalidArgument("transport '{}': want inproc, tcp, ipc or ucx",
                                 transport);
}

Result<std::string> ResolveBindHost(const std::string& endpoint) {
  std::string host, port;
  if (!SplitTcpEndpoint(endpoint, &host, &port) || IsWildcardHost(host)) {
    return endpoint;
  }
  in_addr probe{};
  if (::inet_pton(AF_INET, host.c_str(), &probe) == 1) return endpoint;
  ASSIGN_OR_RETURN(std::string ip, Resolve(host));
  return "tcp://" + ip + ":" + port;
}

}  // namespace strata
