#pragma once

// Shared by the benchmarks that compare our push and pull with plain TCP
// sockets (transport_bench, ps_bench): the raw-socket baseline, timing and
// statistics helpers, and the flags both accept. Header-only: each bench is
// one program.
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/status.h"
#include "transport/inproc/transport.h"
#include "transport/transport.h"
#include "transport/zmq/transport.h"

namespace strata::bench {

using Clock = std::chrono::steady_clock;

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * 1024;

enum class Op { kPush, kPull };

inline const char* OpName(Op op) { return op == Op::kPush ? "push" : "pull"; }

inline std::string SizeName(size_t bytes) {
  if (bytes >= kMiB) return std::to_string(bytes / kMiB) + " MiB";
  return std::to_string(bytes / kKiB) + " KiB";
}

[[noreturn]] inline void Die(const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", program_invocation_short_name, what.c_str());
  std::exit(1);
}

inline void Check(const Status& s, const char* what) {
  if (!s.ok()) Die(std::string(what) + ": " + s.ToString());
}

inline double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Runs `n` copies of `body(i)` on their own threads, released together;
// returns the wall time from release to the last one finishing.
inline double TimeParallel(int n, const std::function<void(int)>& body) {
  std::mutex mu;
  std::condition_variable cv;
  bool go = false;
  int ready = 0;
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      {
        std::unique_lock<std::mutex> lock(mu);
        ++ready;
        cv.notify_all();
        cv.wait(lock, [&] { return go; });
      }
      body(i);
    });
  }
  Clock::time_point start;
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return ready == n; });
    go = true;
    start = Clock::now();
  }
  cv.notify_all();
  for (std::thread& t : threads) t.join();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// `bytes` of touched memory (every page faulted in), filled with `fill`,
// shared by reference (views of it are sent without copies, as a PS node
// sends views of its tensors).
inline std::shared_ptr<uint8_t> MakeBlock(size_t bytes, uint8_t fill = 1) {
  std::shared_ptr<uint8_t> block(static_cast<uint8_t*>(std::aligned_alloc(
                                     64, std::max(bytes, size_t{64}))),
                                 [](uint8_t* p) { std::free(p); });
  if (!block) Die("out of memory");
  std::memset(block.get(), fill, bytes);
  return block;
}

// A node factory: a transport for a node id (in-process or ZeroMQ).
using TransportFactory = std::function<std::unique_ptr<Transport>(NodeId)>;

// In-process nodes on `fabric` (which outlives the factory's use).
inline TransportFactory InProcFactory(InProcFabric& fabric) {
  return [&fabric](NodeId id) {
    auto t = fabric.NewTransport(id);
    Check(t.status(), "inproc transport");
    return std::move(t).value();
  };
}

// ZeroMQ nodes with `io_threads` I/O threads: each with a context of its
// own (as separate processes have), or all in one shared context.
inline TransportFactory ZmqFactory(bool shared_context, int io_threads) {
  std::shared_ptr<ZmqContext> shared;
  if (shared_context) {
    auto ctx = ZmqContext::Create(io_threads);
    Check(ctx.status(), "zmq context");
    shared = *ctx;
  }
  return [shared, io_threads](NodeId id) {
    ZmqOptions options;
    options.context = shared;  // null: the node owns its context
    options.io_threads = io_threads;
    auto t = NewZmqTransport(id, options);
    Check(t.status(), "zmq transport");
    return std::move(t).value();
  };
}

// Ours, wired like a PS cluster without a coordinator: servers are node ids
// 0..S-1 and workers 100..100+W-1, each bound to `bind_endpoint`, and every
// worker connected to every server both ways.
struct TransportMesh {
  std::vector<std::unique_ptr<Transport>> servers;
  std::vector<std::unique_ptr<Transport>> workers;
};
inline TransportMesh MakeMesh(int servers, int workers,
                              const TransportFactory& factory,
                              const std::string& bind_endpoint) {
  TransportMesh mesh;
  for (int s = 0; s < servers; ++s) {
    mesh.servers.push_back(factory(s));
    Check(mesh.servers.back()->Bind(bind_endpoint), "bind server");
  }
  for (int w = 0; w < workers; ++w) {
    mesh.workers.push_back(factory(100 + w));
    Check(mesh.workers.back()->Bind(bind_endpoint), "bind worker");
  }
  for (auto& w : mesh.workers) {
    for (auto& s : mesh.servers) {
      Check(w->Connect(s->node_id(), s->endpoint()), "connect");
      Check(s->Connect(w->node_id(), w->endpoint()), "connect");
    }
  }
  return mesh;
}

// ---------------------------------------------------------------------------
// Raw baseline: one blocking TCP socket pair per worker-server link on
// 127.0.0.1, the same request/reply pattern, no framing beyond a 16-byte
// request and an 8-byte ack.

inline void WriteAll(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) Die(std::string("raw send: ") + std::strerror(errno));
    p += k;
    n -= static_cast<size_t>(k);
  }
}

inline bool ReadAll(int fd, void* data, size_t n) {
  auto* p = static_cast<uint8_t*>(data);
  while (n > 0) {
    const ssize_t k = ::recv(fd, p, n, MSG_WAITALL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

inline void NoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// A TCP socket listening on 127.0.0.1 at a free port, written to `addr`.
inline int LoopbackListener(sockaddr_in* addr) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  *addr = {};
  addr->sin_family = AF_INET;
  addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(*addr);
  if (listener < 0 ||
      ::bind(listener, reinterpret_cast<sockaddr*>(addr), len) != 0 ||
      ::listen(listener, 1) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(addr), &len) != 0) {
    Die("raw listen");
  }
  return listener;
}

struct RawRequest {
  uint32_t op;  // 0 push, 1 pull, 2 quit
  uint32_t unused;
  uint64_t bytes;
};

class RawCluster {
 public:
  // kPerNode: one thread per worker and per server, like the transport
  // nodes (a server polls its links; a worker sends to every server, then
  // collects every reply). kPerLink: one thread per link on each end, so
  // links never wait for each other (more threads than the nodes have).
  enum class Threads { kPerNode, kPerLink };

  RawCluster(int servers, int workers, size_t max_bytes, Threads threads)
      : servers_(servers), workers_(workers), threads_(threads) {
    const size_t share = max_bytes / servers;
    for (int i = 0; i < servers * workers; ++i) {
      sockaddr_in addr{};
      const int listener = LoopbackListener(&addr);
      const socklen_t len = sizeof(addr);
      int client = ::socket(AF_INET, SOCK_STREAM, 0);
      if (::connect(client, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
        Die("raw connect");
      }
      int server = ::accept(listener, nullptr, nullptr);
      ::close(listener);
      if (server < 0) Die("raw accept");
      NoDelay(client);
      NoDelay(server);
      auto link = std::make_unique<Link>();
      link->client = client;
      link->server = server;
      link->client_buffer = MakeBlock(share);
      link->server_buffer = MakeBlock(share);
      links_.push_back(std::move(link));
    }
    if (threads_ == Threads::kPerLink) {
      for (auto& link : links_) {
        server_threads_.emplace_back([l = link.get()] {
          while (ServeOne(*l)) {
          }
        });
      }
    } else {
      for (int s = 0; s < servers_; ++s) {
        server_threads_.emplace_back([this, s] { ServeNode(s); });
      }
    }
  }

  ~RawCluster() {
    for (auto& link : links_) {
      RawRequest quit{2, 0, 0};
      WriteAll(link->client, &quit, sizeof(quit));
    }
    for (std::thread& t : server_threads_) t.join();
    for (auto& link : links_) {
      ::close(link->client);
      ::close(link->server);
    }
  }

  double Run(Op op, size_t bytes, int ops) {
    const size_t share = bytes / servers_;
    if (threads_ == Threads::kPerLink) {
      return TimeParallel(static_cast<int>(links_.size()), [&](int i) {
        for (int k = 0; k < ops; ++k) {
          Request(*links_[i], op, share);
          Collect(*links_[i], op, share);
        }
      });
    }
    return TimeParallel(workers_, [&](int w) {
      for (int k = 0; k < ops; ++k) {
        for (int s = 0; s < servers_; ++s) {
          Request(*links_[w * servers_ + s], op, share);
        }
        for (int s = 0; s < servers_; ++s) {
          Collect(*links_[w * servers_ + s], op, share);
        }
      }
    });
  }

 private:
  struct Link {
    int client = -1;
    int server = -1;
    std::shared_ptr<uint8_t> client_buffer;
    std::shared_ptr<uint8_t> server_buffer;
  };

  static void Request(Link& link, Op op, size_t share) {
    RawRequest req{op == Op::kPush ? 0u : 1u, 0, share};
    WriteAll(link.client, &req, sizeof(req));
    if (op == Op::kPush) WriteAll(link.client, link.client_buffer.get(), share);
  }

  static void Collect(Link& link, Op op, size_t share) {
    uint64_t ack = 0;
    const bool ok = op == Op::kPush
                        ? ReadAll(link.client, &ack, sizeof(ack))
                        : ReadAll(link.client, link.client_buffer.get(), share);
    if (!ok) Die("raw reply");
  }

  // Serves one request on `link`; false on quit or a closed connection.
  static bool ServeOne(Link& link) {
    RawRequest req{};
    if (!ReadAll(link.server, &req, sizeof(req)) || req.op == 2) return false;
    if (req.op == 0) {
      if (!ReadAll(link.server, link.server_buffer.get(), req.bytes)) {
        return false;
      }
      const uint64_t ack = 1;
      WriteAll(link.server, &ack, sizeof(ack));
    } else {
      WriteAll(link.server, link.server_buffer.get(), req.bytes);
    }
    return true;
  }

  // Server `s` serves all its links from one thread.
  void ServeNode(int s) {
    std::vector<Link*> open;
    for (int w = 0; w < workers_; ++w)
      open.push_back(links_[w * servers_ + s].get());
    while (!open.empty()) {
      std::vector<pollfd> fds;
      for (Link* l : open) fds.push_back({l->server, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), 1000) < 0 && errno != EINTR) {
        Die("raw poll");
      }
      std::vector<Link*> still_open;
      for (size_t i = 0; i < open.size(); ++i) {
        if (fds[i].revents == 0 || ServeOne(*open[i])) {
          still_open.push_back(open[i]);
        }
      }
      open.swap(still_open);
    }
  }

  const int servers_;
  const int workers_;
  const Threads threads_;
  std::vector<std::unique_ptr<Link>> links_;
  std::vector<std::thread> server_threads_;
};

// ---------------------------------------------------------------------------
// Flags both benches accept:
// --sizes=4K,1M  --topologies=1+1,2+2  --ops=push,pull  --no-inproc
// --context=own|shared

struct CommonFlags {
  std::vector<size_t> sizes = {4 * kKiB, 1 * kMiB, 16 * kMiB, 64 * kMiB};
  std::vector<std::pair<int, int>> topologies = {{1, 1}, {2, 2}};
  std::vector<Op> ops = {Op::kPush, Op::kPull};
  bool inproc = true;
  bool shared_context = false;  // one ZeroMQ context for all nodes
};

inline std::vector<std::string> SplitCommas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = std::min(s.find(',', start), s.size());
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// The value of `--name=value` in `arg`, if `arg` is that flag.
inline std::optional<std::string> FlagValue(const std::string& arg,
                                            const char* name) {
  const std::string prefix = std::string("--") + name + "=";
  if (arg.rfind(prefix, 0) != 0) return std::nullopt;
  return arg.substr(prefix.size());
}

// Applies `arg` if it is one of the common flags; false otherwise.
inline bool ParseCommonFlag(const std::string& arg, CommonFlags* f) {
  if (auto v = FlagValue(arg, "sizes")) {
    f->sizes.clear();
    for (const std::string& x : SplitCommas(*v)) {
      const size_t unit = x.back() == 'M' ? kMiB : kKiB;
      f->sizes.push_back(std::stoul(x) * unit);
    }
  } else if (auto v = FlagValue(arg, "topologies")) {
    f->topologies.clear();
    for (const std::string& x : SplitCommas(*v)) {
      f->topologies.push_back(
          {std::stoi(x), std::stoi(x.substr(x.find('+') + 1))});
    }
  } else if (auto v = FlagValue(arg, "ops")) {
    f->ops.clear();
    for (const std::string& x : SplitCommas(*v)) {
      f->ops.push_back(x == "pull" ? Op::kPull : Op::kPush);
    }
  } else if (auto v = FlagValue(arg, "context")) {
    f->shared_context = *v == "shared";
  } else if (arg == "--no-inproc") {
    f->inproc = false;
  } else {
    return false;
  }
  return true;
}

// Dies unless the flags leave something to run.
inline void CheckCommonFlags(const CommonFlags& f) {
  if (f.sizes.empty() || f.topologies.empty() || f.ops.empty())
    Die("nothing to run");
}

}  // namespace strata::bench
