// Push and pull throughput through the transport, against plain blocking TCP
// sockets moving the same bytes in the same run.
//
// A "push" is a worker sending N bytes (float gradients) and the server
// answering with a small ack; a "pull" is a worker sending a small request
// and the server answering with N bytes. With S servers each worker sends
// N / S bytes to every server per operation (2 + 2: two workers, each talking
// to both servers). Throughput = payload bytes moved by all workers / wall
// time. The raw baseline uses one blocking socket pair per worker-server link,
// each driven by its own thread on both ends (the strongest simple baseline:
// links proceed in parallel, no framing beyond a 16-byte request).
//
// Prints one table (median of several repetitions; ours and raw alternate)
// and whether the targets are met. Runs in well under a minute.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
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
#include <vector>

#include "common/log.h"
#include "common/status.h"
#include "transport/inproc_transport.h"
#include "transport/transport.h"
#include "transport/zmq_transport.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * 1024;
constexpr int kRepetitions = 7;
// Bytes per timed measurement (bounded by the op counts below).
constexpr size_t kTargetBytes = 128 * kMiB;
constexpr milliseconds kTimeout{10000};

enum class Op { kPush, kPull };

const char* OpName(Op op) { return op == Op::kPush ? "push" : "pull"; }

std::string SizeName(size_t bytes) {
  if (bytes >= kMiB) return std::to_string(bytes / kMiB) + " MiB";
  return std::to_string(bytes / kKiB) + " KiB";
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "transport_bench: %s\n", what.c_str());
  std::exit(1);
}

void Check(const Status& s, const char* what) {
  if (!s.ok()) Die(std::string(what) + ": " + s.ToString());
}

// Runs `n` copies of `body(i)` on their own threads, released together;
// returns the wall time from release to the last one finishing.
double TimeParallel(int n, const std::function<void(int)>& body) {
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

// A block of touched memory shared by reference (views of it are sent
// without copies, as a PS node sends views of its tensors).
std::shared_ptr<uint8_t> MakeBlock(size_t bytes) {
  std::shared_ptr<uint8_t> block(
      static_cast<uint8_t*>(std::aligned_alloc(64, bytes)),
      [](uint8_t* p) { std::free(p); });
  if (!block) Die("out of memory");
  for (size_t i = 0; i < bytes; i += 4096) block.get()[i] = 1;
  std::memset(block.get(), 1, bytes);
  return block;
}

// ---------------------------------------------------------------------------
// Ours: a cluster of transport nodes. Servers are ids 0..S-1, workers
// 100..100+W-1.

class TransportCluster {
 public:
  using Factory = std::function<std::unique_ptr<Transport>(NodeId)>;

  TransportCluster(int servers, int workers, size_t max_bytes,
                   const Factory& factory, const std::string& bind_endpoint)
      : max_bytes_(max_bytes) {
    for (int s = 0; s < servers; ++s) {
      servers_.push_back(factory(s));
      Check(servers_.back()->Bind(bind_endpoint), "bind server");
    }
    for (int w = 0; w < workers; ++w) {
      workers_.push_back(factory(100 + w));
      Check(workers_.back()->Bind(bind_endpoint), "bind worker");
    }
    for (auto& w : workers_) {
      for (auto& s : servers_) {
        Check(w->Connect(s->node_id(), s->endpoint()), "connect");
        Check(s->Connect(w->node_id(), w->endpoint()), "connect");
      }
    }
    params_ = MakeBlock(max_bytes);
    for (size_t w = 0; w < workers_.size(); ++w) {
      grads_.push_back(MakeBlock(max_bytes));
    }
    for (auto& s : servers_) {
      server_threads_.emplace_back([this, t = s.get()] { Serve(t); });
    }
  }

  ~TransportCluster() {
    stop_ = true;
    for (std::thread& t : server_threads_) t.join();
  }

  // Seconds for `ops` operations of `bytes` per worker.
  double Run(Op op, size_t bytes, int ops) {
    const size_t share = bytes / servers_.size();
    return TimeParallel(static_cast<int>(workers_.size()), [&](int w) {
      Transport& t = *workers_[w];
      for (int i = 0; i < ops; ++i) {
        for (size_t s = 0; s < servers_.size(); ++s) {
          Message m;
          m.header.key_begin = 0;
          m.header.key_end = static_cast<int64_t>(share / sizeof(float));
          if (op == Op::kPush) {
            m.header.type = MessageType::kPush;
            m.payloads.push_back(
                Buffer::Adopt(grads_[w].get() + s * share, share, grads_[w]));
          } else {
            m.header.type = MessageType::kPullRequest;
          }
          Check(t.Send(static_cast<NodeId>(s), std::move(m)), "worker send");
        }
        for (size_t s = 0; s < servers_.size(); ++s) {
          Result<Message> reply = t.Recv(kTimeout);
          Check(reply.status(), "worker recv");
          if (op == Op::kPull && reply->payload_bytes() != share) {
            Die("short pull reply");
          }
        }
      }
    });
  }

 private:
  void Serve(Transport* t) {
    while (!stop_) {
      Result<Message> req = t->Recv(milliseconds(50));
      if (!req.ok()) {
        if (req.status().code() == Status::Code::kDeadlineExceeded) continue;
        Die("server recv: " + req.status().ToString());
      }
      Message reply;
      reply.header.request_id = req->header.request_id;
      if (req->header.type == MessageType::kPullRequest) {
        const size_t bytes =
            static_cast<size_t>(req->header.key_end - req->header.key_begin) *
            sizeof(float);
        reply.header.type = MessageType::kPullReply;
        reply.payloads.push_back(
            Buffer::Adopt(params_.get(), std::min(bytes, max_bytes_), params_));
      } else {
        reply.header.type = MessageType::kAck;
      }
      Check(t->Send(req->header.sender, std::move(reply)), "server send");
    }
  }

  const size_t max_bytes_;
  std::vector<std::unique_ptr<Transport>> servers_;
  std::vector<std::unique_ptr<Transport>> workers_;
  std::shared_ptr<uint8_t> params_;
  std::vector<std::shared_ptr<uint8_t>> grads_;
  std::vector<std::thread> server_threads_;
  std::atomic<bool> stop_{false};
};

// ---------------------------------------------------------------------------
// Raw: one blocking TCP socket pair per worker-server link, no framing
// beyond a 16-byte request and an 8-byte ack.

void WriteAll(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) Die(std::string("raw send: ") + std::strerror(errno));
    p += k;
    n -= static_cast<size_t>(k);
  }
}

bool ReadAll(int fd, void* data, size_t n) {
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

void NoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
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
      int listener = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      socklen_t len = sizeof(addr);
      if (listener < 0 ||
          ::bind(listener, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
          ::listen(listener, 1) != 0 ||
          ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) !=
              0) {
        Die("raw listen");
      }
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

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int OpsFor(size_t bytes) {
  return static_cast<int>(
      std::clamp<size_t>(kTargetBytes / bytes, size_t{3}, size_t{2000}));
}

struct Row {
  int servers, workers;
  Op op;
  size_t bytes;
  double ours, raw, raw_link;  // raw_link: 0 when not measured (1+1)
};

struct Flags {
  std::vector<size_t> sizes = {4 * kKiB, 1 * kMiB, 16 * kMiB, 64 * kMiB};
  std::vector<std::pair<int, int>> topologies = {{1, 1}, {2, 2}};
  std::vector<Op> ops = {Op::kPush, Op::kPull};
  bool inproc = true;
  bool shared_context = false;  // one ZeroMQ context for all nodes
  int io_threads = 1;           // per context
};

std::vector<std::string> SplitCommas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = std::min(s.find(',', start), s.size());
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// --sizes=4K,1M  --topologies=1+1,2+2  --ops=push,pull  --no-inproc
// --context=own|shared  --io-threads=N
Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* name) -> std::optional<std::string> {
      const std::string prefix = std::string("--") + name + "=";
      if (arg.rfind(prefix, 0) != 0) return std::nullopt;
      return arg.substr(prefix.size());
    };
    if (auto v = value("sizes")) {
      f.sizes.clear();
      for (const std::string& x : SplitCommas(*v)) {
        const size_t unit = x.back() == 'M' ? kMiB : kKiB;
        f.sizes.push_back(std::stoul(x) * unit);
      }
    } else if (auto v = value("topologies")) {
      f.topologies.clear();
      for (const std::string& x : SplitCommas(*v)) {
        f.topologies.push_back(
            {std::stoi(x), std::stoi(x.substr(x.find('+') + 1))});
      }
    } else if (auto v = value("ops")) {
      f.ops.clear();
      for (const std::string& x : SplitCommas(*v)) {
        f.ops.push_back(x == "pull" ? Op::kPull : Op::kPush);
      }
    } else if (auto v = value("context")) {
      f.shared_context = *v == "shared";
    } else if (auto v = value("io-threads")) {
      f.io_threads = std::stoi(*v);
    } else if (arg == "--no-inproc") {
      f.inproc = false;
    } else {
      Die("unknown flag " + arg +
          " (try --sizes=4K,64M --topologies=1+1 --ops=push --no-inproc)");
    }
  }
  if (f.sizes.empty() || f.topologies.empty() || f.ops.empty()) {
    Die("nothing to run");
  }
  return f;
}

void Main(int argc, char** argv) {
  SetLogLevel(LogLevel::kWarning);
  const Flags flags = ParseFlags(argc, argv);
  const std::vector<size_t>& sizes = flags.sizes;
  const size_t max_bytes = *std::max_element(sizes.begin(), sizes.end());
  const auto bench_start = Clock::now();

  std::shared_ptr<ZmqContext> shared;
  if (flags.shared_context) {
    auto ctx = ZmqContext::Create(flags.io_threads);
    Check(ctx.status(), "zmq context");
    shared = *ctx;
  }
  auto zmq_factory = [&](NodeId id) {
    ZmqOptions options;
    options.context = shared;  // null: the node owns its context
    options.io_threads = flags.io_threads;
    auto t = NewZmqTransport(id, options);
    Check(t.status(), "zmq transport");
    return std::move(t).value();
  };

  std::printf(
      "transport_bench: ZeroMQ transport over loopback TCP (frames of 1 MiB)\n"
      "vs raw blocking TCP sockets moving the same bytes; MB/s = 1e6 bytes/s "
      "of\npayload, median of %d runs, variants interleaved; %u hardware "
      "threads;\nZeroMQ context: %s, %d I/O thread(s) each. raw: one thread "
      "per worker\nand per server, like ours; raw/link: one thread per link "
      "on each end.\n\n",
      kRepetitions, std::thread::hardware_concurrency(),
      flags.shared_context ? "one shared by all nodes" : "one per node",
      flags.io_threads);
  std::printf("%-8s %-5s %-7s %10s %10s %9s %10s %9s\n", "topology", "op",
              "size", "ours MB/s", "raw MB/s", "ours/raw", "raw/link",
              "ours/r-l");
  std::fflush(stdout);

  std::vector<Row> rows;
  for (auto [servers, workers] : flags.topologies) {
    TransportCluster ours(servers, workers, max_bytes, zmq_factory,
                          "tcp://127.0.0.1:*");
    RawCluster raw(servers, workers, max_bytes, RawCluster::Threads::kPerNode);
    // With one link per node the two raw variants are the same program.
    std::unique_ptr<RawCluster> raw_link;
    if (servers * workers > 1) {
      raw_link = std::make_unique<RawCluster>(servers, workers, max_bytes,
                                              RawCluster::Threads::kPerLink);
    }
    for (Op op : flags.ops) {
      for (size_t bytes : sizes) {
        const int ops = OpsFor(bytes);
        const double moved = static_cast<double>(bytes) * workers * ops;
        std::vector<std::function<double()>> variants = {
            [&] { return moved / ours.Run(op, bytes, ops) / 1e6; },
            [&] { return moved / raw.Run(op, bytes, ops) / 1e6; }};
        if (raw_link) {
          variants.push_back(
              [&] { return moved / raw_link->Run(op, bytes, ops) / 1e6; });
        }
        // Warm up (pools, caches, TCP windows), then rotate the order each
        // repetition so that no variant always runs first.
        ours.Run(op, bytes, std::max(1, ops / 4));
        raw.Run(op, bytes, std::max(1, ops / 4));
        if (raw_link) raw_link->Run(op, bytes, std::max(1, ops / 4));
        std::vector<std::vector<double>> mbps(variants.size());
        for (int r = 0; r < kRepetitions; ++r) {
          for (size_t k = 0; k < variants.size(); ++k) {
            const size_t v = (k + r) % variants.size();
            mbps[v].push_back(variants[v]());
          }
        }
        Row row{servers,
                workers,
                op,
                bytes,
                Median(mbps[0]),
                Median(mbps[1]),
                raw_link ? Median(mbps[2]) : 0.0};
        rows.push_back(row);
        std::printf("%d+%-6d %-5s %-7s %10.0f %10.0f %9.2f", servers, workers,
                    OpName(op), SizeName(bytes).c_str(), row.ours, row.raw,
                    row.ours / row.raw);
        if (raw_link) {
          std::printf(" %10.0f %9.2f", row.raw_link, row.ours / row.raw_link);
        }
        std::printf("\n");
        std::fflush(stdout);
      }
    }
  }

  double min_ratio = 1e9, min_link_ratio = 1e9;
  for (const Row& row : rows) {
    if (row.bytes < kMiB) continue;
    min_ratio = std::min(min_ratio, row.ours / row.raw);
    min_link_ratio = std::min(
        min_link_ratio, row.ours / (row.raw_link > 0 ? row.raw_link : row.raw));
  }
  std::printf(
      "\ntarget ours/raw >= 0.80 for 1-64 MiB: %s (lowest %.2f; against "
      "thread-per-link raw: lowest %.2f)\n",
      min_ratio >= 0.8 ? "met" : "NOT met", min_ratio, min_link_ratio);
  if (!flags.inproc) return;

  // In-process, 1 + 1, largest size.
  InProcFabric fabric;
  auto inproc_factory = [&fabric](NodeId id) {
    auto t = fabric.NewTransport(id);
    Check(t.status(), "inproc transport");
    return std::move(t).value();
  };
  TransportCluster inproc(1, 1, max_bytes, inproc_factory, "inproc://*");
  std::printf("in-process, 1+1, %s (zero copy):\n",
              SizeName(max_bytes).c_str());
  bool inproc_met = true;
  for (Op op : flags.ops) {
    const int ops = 200;
    inproc.Run(op, max_bytes, 10);
    std::vector<double> mbps;
    for (int r = 0; r < kRepetitions; ++r) {
      mbps.push_back(static_cast<double>(max_bytes) * ops /
                     inproc.Run(op, max_bytes, ops) / 1e6);
    }
    double tcp = 0;
    for (const Row& row : rows) {
      if (row.servers == 1 && row.workers == 1 && row.op == op &&
          row.bytes == max_bytes) {
        tcp = row.ours;
      }
    }
    const double m = Median(mbps);
    inproc_met = inproc_met && m >= 2 * tcp;
    std::printf("  %-5s %11.0f MB/s = %.0fx ours over TCP\n", OpName(op), m,
                m / tcp);
  }

  std::printf("target in-process %s >= 2x TCP: %s\n",
              SizeName(max_bytes).c_str(), inproc_met ? "met" : "NOT met");
  std::printf(
      "total bench time %.1f s\n",
      std::chrono::duration<double>(Clock::now() - bench_start).count());
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  strata::Main(argc, argv);
  return 0;
}
