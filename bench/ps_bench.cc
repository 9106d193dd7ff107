// Parameter-server push and pull throughput through the whole PS stack
// (PsClient -> RpcEndpoint -> transport -> ParameterServer and back),
// against plain blocking TCP sockets moving the same bytes with the same
// request/reply pattern and thread layout, in the same run.
//
// A push is PsClient::Push(grads)->Wait(): the value is split over the
// servers by the key layout, each server applies it (asynchronous mode, plain
// SGD: one pass params -= lr * grad over its range) and acks. A pull is
// PsClient::Pull(dest)->Wait(): each server replies with a view of its range
// (copy on write: nothing changes it during a pull-only loop), and the
// worker's receiving thread writes each frame into `dest` as it arrives
// (receive in place; one copy). With S servers and W workers
// every worker pushes or pulls the whole value (N / S bytes per server), all
// workers at once; throughput = N * W * operations / wall time.
//
// The raw baseline: one blocking TCP socket per worker-server link on
// 127.0.0.1, one thread per worker and one per server (as our nodes have);
// push = a 16-byte request + N / S bytes, answered by an 8-byte ack; pull =
// a 16-byte request answered by N / S bytes received into a preallocated
// buffer. It does no work on the bytes (no SGD pass, no copy into a model).
// Two more baselines (bare_zmq.h, off with --no-bare-zmq): plain ZeroMQ
// moving the same bytes in the same pattern ("zmq"), and the same doing our
// work on the bytes (SGD pass on a push, copy of a pull into a destination:
// "zmq+work"), so that ours / zmq+work is what our layers alone cost.
//
//   build-bench/bench/ps_bench [--sizes=4K,1M,16M,64M] [--topologies=1+1,2+2]
//                              [--ops=push,pull] [--reps=N] [--no-inproc]
//                              [--transport=zmq|ucx]
//                              [--ucx_shm=auto|0|1]  (UcxOptions::
//                              shared_memory: shared memory and CMA on
//                              loopback, by default; 0: UCX's TCP)
//                              [--context=own|shared]
//                              [--range_kb=K]  (each server's share in
//                              ranges of at most K KiB, as a cluster's
//                              server node with cluster.pipeline_kb = K)
//                              [--spin_us=US]  (in-process line: how long
//                              our threads poll before sleeping,
//                              cluster.spin_us; its default unless given)
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

#include "bare_zmq.h"
#include "bench_common.h"
#include "common/config.h"
#include "common/log.h"
#include "common/status.h"
#include "ps/client.h"
#include "ps/key_range.h"
#include "ps/optimizer.h"
#include "ps/server.h"
#include "ps/server_group.h"
#include "transport/inproc/transport.h"
#include "transport/rpc.h"
#include "transport/spin_wait.h"
#include "transport/transport.h"
#include "transport/ucx/transport.h"
#include "transport/zmq/transport.h"

namespace strata {
namespace {

using namespace bench;  // NOLINT: the shared bench vocabulary

using std::chrono::milliseconds;

constexpr size_t kTargetBytes = 128 * kMiB;
constexpr milliseconds kTimeout{20000};
constexpr double kLearningRate = 1e-3;

std::vector<float> Floats(size_t n, float value) {
  return std::vector<float>(n, value);
}

// ---------------------------------------------------------------------------
// Ours: S ParameterServers (node ids 0..S-1) and W workers (100..), each
// worker an RpcEndpoint + PsClient, wired directly (no coordinator).

class PsCluster {
 public:
  using Factory = TransportFactory;

  // `range_floats` > 0: each server's share is cut into ranges of at most
  // that many floats (KeyLayout::Bucketed, served by a ServerGroup as a
  // cluster's server node does with cluster.pipeline_kb): a push or pull
  // is then one message per range, and the server applies each range of a
  // push as soon as it has landed, while the next is on the wire.
  PsCluster(int servers, int workers, size_t bytes, const Factory& factory,
            const std::string& bind_endpoint, int64_t range_floats) {
    const int64_t keys = static_cast<int64_t>(bytes / sizeof(float));
    Result<KeyLayout> layout = KeyLayout::Bucketed(keys, servers, range_floats);
    Check(layout.status(), "key layout");
    TransportMesh mesh = MakeMesh(servers, workers, factory, bind_endpoint);
    std::vector<std::unique_ptr<Transport>>& server_t = mesh.servers;
    std::vector<std::unique_ptr<Transport>>& worker_t = mesh.workers;
    std::vector<NodeId> server_ids;
    for (int s = 0; s < servers; ++s) {
      ServerOptions so;
      so.optimizer.kind = OptimizerOptions::Kind::kSgd;  // no momentum
      so.schedule.lr = kLearningRate;
      so.policy.mode = UpdatePolicy::Mode::kAsync;
      so.policy.num_workers = workers;
      server_ids.push_back(s);
      auto node = std::make_unique<ServerNode>();
      ServerNode* n = node.get();
      node->rpc = std::make_unique<RpcEndpoint>(
          std::move(server_t[s]),
          [n](Message m) { n->group->Handle(std::move(m)); });
      node->group = std::make_unique<ServerGroup>(so, *node->rpc);
      node->group->Configure(layout->RangesOf(s), so.schedule);
      // As a cluster's server node (cluster.inline_server, on by default):
      // pushes and pulls are handled on the thread that delivers them
      // where the transport has one (in process, UCX).
      node->rpc->SetInlineHandling([](const MessageHeader& h) {
        return h.type == MessageType::kPush ||
               h.type == MessageType::kPullRequest;
      });
      node->rpc->Start();
      servers_.push_back(std::move(node));
    }
    for (int w = 0; w < workers; ++w) {
      rpcs_.push_back(
          std::make_unique<RpcEndpoint>(std::move(worker_t[w]), [](Message m) {
            LogWarning("worker got an unexpected {}",
                       MessageTypeName(m.header.type));
          }));
      rpcs_.back()->Start();
      clients_.push_back(
          std::make_unique<PsClient>(*rpcs_.back(), *layout, server_ids));
      grads_.push_back(Floats(static_cast<size_t>(keys), 1e-3f));
      dest_.push_back(Floats(static_cast<size_t>(keys), 0.0f));
    }
    const std::vector<float> initial = Floats(static_cast<size_t>(keys), 0.5f);
    Check(clients_[0]->PushInitial(initial.data())->Wait(kTimeout).status(),
          "initial push");
    base_versions_.assign(static_cast<size_t>(layout->num_ranges()), 0);
  }

  ~PsCluster() {
    for (auto& rpc : rpcs_) rpc->Stop();
    for (auto& s : servers_) s->rpc->Stop();
  }

  // Seconds for `ops` operations per worker, all workers at once.
  double Run(Op op, int ops) {
    return TimeParallel(static_cast<int>(clients_.size()), [&](int w) {
      PsClient& c = *clients_[w];
      for (int i = 0; i < ops; ++i) {
        if (op == Op::kPush) {
          Check(
              c.Push(grads_[w].data(), base_versions_)->Wait(kTimeout).status(),
              "push");
        } else {
          Check(c.Pull(dest_[w].data(), {})->Wait(kTimeout).status(), "pull");
        }
      }
    });
  }

 private:
  struct ServerNode {
    std::unique_ptr<RpcEndpoint> rpc;
    std::unique_ptr<ServerGroup> group;
  };
  std::vector<std::unique_ptr<ServerNode>> servers_;
  std::vector<std::unique_ptr<RpcEndpoint>> rpcs_;
  std::vector<std::unique_ptr<PsClient>> clients_;
  std::vector<std::vector<float>> grads_;
  std::vector<std::vector<float>> dest_;
  std::vector<int64_t> base_versions_;
};

// ---------------------------------------------------------------------------
// Raw: one blocking TCP socket pair per worker-server link (as in
// transport_bench), one thread per worker and one per server.

int OpsFor(size_t bytes) {
  return static_cast<int>(
      std::clamp<size_t>(kTargetBytes / bytes, size_t{3}, size_t{400}));
}

struct Row {
  int servers, workers;
  Op op;
  size_t bytes;
  double ours, raw, ratio;  // MB/s medians; ratio = median of paired ratios
  double zmq, zmq_ratio;    // bare ZeroMQ MB/s and zmq/raw (0: not run)
  double zmq_work;          // bare ZeroMQ doing our work on the bytes, MB/s
};

struct Flags : bench::CommonFlags {
  int reps = 7;
  bool bare_zmq = true;  // also measure plain ZeroMQ (bare_zmq.h)
  bool ucx = false;      // ours over the UCX transport instead of ZeroMQ
  // --ucx_shm=auto|0|1: UcxOptions::shared_memory (unset: the transport's
  // default, STRATA_UCX_SHARED_MEMORY or auto).
  std::optional<UcxOptions::SharedMemory> ucx_shm;
  int64_t range_floats = 0;  // --range_kb: ranges per server (0: one)
  // --spin_us: cluster.spin_us's default unless given.
  int spin_us = static_cast<int>(Config().GetInt("cluster.spin_us"));
};

// The common flags (bench_common.h) and --reps=N.
Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (bench::ParseCommonFlag(arg, &f)) continue;
    if (auto v = bench::FlagValue(arg, "reps")) {
      f.reps = std::max(1, std::stoi(*v));
    } else if (auto k = bench::FlagValue(arg, "range_kb")) {
      f.range_floats = static_cast<int64_t>(std::stod(*k) * 1024 / 4);
    } else if (auto u = bench::FlagValue(arg, "spin_us")) {
      f.spin_us = std::max(0, std::stoi(*u));
    } else if (auto m = bench::FlagValue(arg, "ucx_shm")) {
      f.ucx_shm = UcxSharedMemoryFromEnv(*m);
      if (!f.ucx_shm) Die("--ucx_shm= wants auto, 0 or 1");
    } else if (arg == "--no-bare-zmq") {
      f.bare_zmq = false;
    } else if (auto t = bench::FlagValue(arg, "transport")) {
      if (*t != "zmq" && *t != "ucx") Die("--transport= wants zmq or ucx");
      f.ucx = *t == "ucx";
      if (f.ucx && !HaveUcx()) Die("this build has no UCX (libucx-dev)");
    } else {
      Die("unknown flag " + arg +
          " (try --sizes=4K,64M --topologies=1+1 --ops=push --reps=5 "
          "--no-inproc --context=shared --no-bare-zmq --transport=ucx "
          "--range_kb=4096 --spin_us=0 --ucx_shm=1)");
    }
  }
  bench::CheckCommonFlags(f);
  return f;
}

// Milliseconds of the work ours does on the bytes and raw does not, for one
// operation on `bytes`: the server's SGD pass of a push, the client's copy
// of a pull into `dest`.
void PrintServerWork(size_t bytes) {
  const size_t n = bytes / sizeof(float);
  std::vector<float> params(n, 0.5f), grads(n, 1e-3f), out(n, 0.0f);
  std::unique_ptr<Optimizer> sgd =
      MakeOptimizer(OptimizerOptions{}, static_cast<int64_t>(n));
  std::vector<double> apply, copy;
  for (int r = 0; r < 5; ++r) {
    auto t0 = Clock::now();
    sgd->Step(params.data(), grads.data(), kLearningRate);
    auto t1 = Clock::now();
    std::memcpy(out.data(), params.data(), bytes);
    auto t2 = Clock::now();
    apply.push_back(Seconds(t0, t1) * 1e3);
    copy.push_back(Seconds(t1, t2) * 1e3);
  }
  std::printf(
      "work on the bytes per operation on %s (in the figures below, not in "
      "raw): SGD pass %.1f ms (push), copy into dest %.1f ms (pull; from "
      "memory,\nwhile receiving in place copies each frame as it arrives)\n\n",
      SizeName(bytes).c_str(), Median(apply), Median(copy));
}

void Main(int argc, char** argv) {
  SetLogLevel(LogLevel::kWarning);
  const Flags flags = ParseFlags(argc, argv);
  SetSpinWait(std::chrono::microseconds(flags.spin_us));
  const size_t max_bytes =
      *std::max_element(flags.sizes.begin(), flags.sizes.end());
  const auto bench_start = Clock::now();

  const TransportFactory ours_factory =
      flags.ucx ? TransportFactory([&flags](NodeId id) {
        UcxOptions options;
        options.shared_memory = flags.ucx_shm;
        auto t = NewUcxTransport(id, options);
        Check(t.status(), "ucx transport");
        return std::move(t).value();
      })
                : ZmqFactory(flags.shared_context, 1);
  const char* ours_bind = flags.ucx ? "ucx://127.0.0.1:*" : "tcp://127.0.0.1:*";

  std::printf(
      "ps_bench: PsClient::Push/Pull(...)->Wait() through RpcEndpoint and "
      "ParameterServer\nover %s, vs raw "
      "blocking TCP sockets moving the\nsame bytes (same request/reply "
      "pattern, one thread per worker and per server).\nServers: async mode, "
      "plain SGD (lr %g, no momentum): every push is one SGD pass over\nthe "
      "server's range; a pull replies with a view of the range, written into "
      "the\ndestination as it arrives. raw does neither. MB/s = 1e6 "
      "payload bytes/s, all workers\ntogether; medians of %d runs, ours and "
      "raw alternating; ratio = median of the\nper-run ratios. %u hardware "
      "threads; ZeroMQ: %s, 1 I/O thread.\n",
      !flags.ucx ? "the ZeroMQ transport on loopback TCP"
      : flags.ucx_shm == UcxOptions::SharedMemory::kOff
          ? "the UCX transport over its TCP transport (--ucx_shm=0)"
          : "the UCX transport, shared memory and CMA on loopback (--ucx_shm)",
      kLearningRate, flags.reps, std::thread::hardware_concurrency(),
      flags.shared_context ? "one context shared by all nodes"
                           : "one context per node");
  if (flags.range_floats > 0) {
    std::printf(
        "ours: each server's share in ranges of at most %g KiB (--range_kb; "
        "a ServerGroup\napplies each range of a push as it lands).\n",
        static_cast<double>(flags.range_floats) * 4 / 1024);
  }
  std::printf(
      "in-process line: threads poll %d us for a message or reply before "
      "sleeping (--spin_us, cluster.spin_us).\n",
      flags.spin_us);
  PrintServerWork(max_bytes);
  std::printf("%-8s %-5s %-7s %10s %10s %9s", "topology", "op", "size",
              "ours MB/s", "raw MB/s", "ours/raw");
  if (flags.bare_zmq) {
    std::printf(" %10s %9s %9s %10s %9s", "zmq MB/s", "zmq/raw", "ours/zmq",
                "zmq+work", "ours/z+w");
  }
  std::printf("\n");
  std::fflush(stdout);

  std::vector<Row> rows;
  for (auto [servers, workers] : flags.topologies) {
    RawCluster raw(servers, workers, max_bytes, RawCluster::Threads::kPerNode);
    std::unique_ptr<BareZmqCluster> bare, bare_work;
    if (flags.bare_zmq) {
      bare = std::make_unique<BareZmqCluster>(servers, workers, max_bytes);
      bare_work = std::make_unique<BareZmqCluster>(servers, workers, max_bytes,
                                                   /*work=*/true);
    }
    for (size_t bytes : flags.sizes) {
      PsCluster ours(servers, workers, bytes, ours_factory, ours_bind,
                     flags.range_floats);
      for (Op op : flags.ops) {
        const int ops = OpsFor(bytes);
        const double moved = static_cast<double>(bytes) * workers * ops;
        // The contenders, run in a rotating order each repetition.
        std::vector<std::function<double(int)>> run = {
            [&](int n) { return ours.Run(op, n); },
            [&](int n) { return raw.Run(op, bytes, n); }};
        if (bare) {
          run.push_back([&](int n) { return bare->Run(op, bytes, n); });
          run.push_back([&](int n) { return bare_work->Run(op, bytes, n); });
        }
        // Warm up (pools, caches, TCP windows).
        for (auto& r : run) r(std::max(1, ops / 4));
        std::vector<std::vector<double>> mbps(run.size());
        std::vector<double> ratio, zmq_ratio;
        for (int rep = 0; rep < flags.reps; ++rep) {
          std::vector<double> got(run.size());
          for (size_t i = 0; i < run.size(); ++i) {
            const size_t k = (i + static_cast<size_t>(rep)) % run.size();
            got[k] = moved / run[k](ops) / 1e6;
          }
          for (size_t k = 0; k < run.size(); ++k) mbps[k].push_back(got[k]);
          ratio.push_back(got[0] / got[1]);
          if (bare) zmq_ratio.push_back(got[2] / got[1]);
        }
        Row row{servers,
                workers,
                op,
                bytes,
                Median(mbps[0]),
                Median(mbps[1]),
                Median(ratio),
                bare ? Median(mbps[2]) : 0.0,
                bare ? Median(zmq_ratio) : 0.0,
                bare ? Median(mbps[3]) : 0.0};
        rows.push_back(row);
        std::printf("%d+%-6d %-5s %-7s %10.0f %10.0f %9.2f", servers, workers,
                    OpName(op), SizeName(bytes).c_str(), row.ours, row.raw,
                    row.ratio);
        if (bare) {
          std::printf(" %10.0f %9.2f %9.2f %10.0f %9.2f", row.zmq,
                      row.zmq_ratio, row.ours / row.zmq, row.zmq_work,
                      row.ours / row.zmq_work);
        }
        std::printf("\n");
        std::fflush(stdout);
      }
    }
  }

  // The lowest of `ratio` over the rows from 1 MiB up, printed against
  // `target` with the row it was in.
  auto print_target = [&](const char* what, double target,
                          const std::function<double(const Row&)>& ratio) {
    double lowest = 1e9;
    std::string where;
    for (const Row& row : rows) {
      if (row.bytes < kMiB || ratio(row) >= lowest) continue;
      lowest = ratio(row);
      where = std::to_string(row.servers) + "+" + std::to_string(row.workers) +
              " " + OpName(row.op) + " " + SizeName(row.bytes);
    }
    if (where.empty()) return;
    std::printf("%s >= %.2f from 1 to 64 MiB: %s (lowest %.2f, %s)\n", what,
                target, lowest >= target ? "met" : "NOT met", lowest,
                where.c_str());
  };
  std::printf("\n");
  print_target("target ours/raw", 0.8, [](const Row& r) { return r.ratio; });
  if (flags.bare_zmq) {
    // Issue 13 part 5: ours against bare ZeroMQ; and against bare ZeroMQ
    // doing our work on the bytes (what the RPC path alone costs).
    print_target("target ours/zmq", 0.9,
                 [](const Row& r) { return r.ours / r.zmq; });
    print_target("same work: ours/zmq+work", 0.9,
                 [](const Row& r) { return r.ours / r.zmq_work; });
  }
  if (flags.inproc) {
    // In-process, 1 + 1, largest size, through the same PS stack.
    InProcFabric fabric;
    PsCluster inproc(1, 1, max_bytes, InProcFactory(fabric), "inproc://*",
                     flags.range_floats);
    std::printf("in-process transport, 1+1, %s (same PS stack):\n",
                SizeName(max_bytes).c_str());
    bool met = true;
    for (Op op : flags.ops) {
      const int ops = OpsFor(max_bytes) * 2;
      inproc.Run(op, 2);
      std::vector<double> mbps;
      for (int r = 0; r < flags.reps; ++r) {
        mbps.push_back(static_cast<double>(max_bytes) * ops /
                       inproc.Run(op, ops) / 1e6);
      }
      double tcp = 0;
      for (const Row& row : rows) {
        if (row.servers == 1 && row.workers == 1 && row.op == op &&
            row.bytes == max_bytes) {
          tcp = row.ours;
        }
      }
      const double m = Median(mbps);
      if (tcp > 0) {
        met = met && m >= 2 * tcp;
        std::printf("  %-5s %10.0f MB/s = %.1fx ours over TCP\n", OpName(op), m,
                    m / tcp);
      } else {
        std::printf("  %-5s %10.0f MB/s (no 1+1 TCP row to compare)\n",
                    OpName(op), m);
      }
    }
    std::printf("target in-process %s >= 2x TCP: %s\n",
                SizeName(max_bytes).c_str(), met ? "met" : "NOT met");
  }
  std::printf("requests handled on the delivering thread (inline): %llu\n",
              static_cast<unsigned long long>(RpcEndpoint::HandledInline()));
  std::printf("total bench time %.1f s\n", Seconds(bench_start, Clock::now()));
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  strata::Main(argc, argv);
  return 0;
}
