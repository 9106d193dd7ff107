// The mini-batch streaming service (docs/design/data_service.md), measured side
// by side in one run:
//
//   1. Throughput. One data server feeding 4 stream clients over loopback
//      TCP (ZeroMQ), each taking batches as fast as it can (prefetch 2,
//      acknowledging each), against a raw TCP baseline moving the same bytes
//      per batch in the same request/reply pattern (bench_common.h's
//      RawCluster: 1 "server" thread, 4 clients, one batch per request).
//   2. Training. lenet on MNIST (synthetic 1x28x28 data without
//      STRATA_DATA_DIR), async, 1 server + 4 workers, batch 16 per worker,
//      loopback TCP, as threads of this process: in-worker loading against
//      the service (static and dynamic assignment, prefetch 2; static with
//      prefetch 8: one request per 8 steps). samples/s from the
//      summary (barrier 0 to the last worker's end) and each worker's share
//      of time spent waiting for data.
//
//   build/bench/data_service_bench [--reps 3] [--iterations 300]
//                                  [--batches 500] [--model lenet]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.h"
#include "cluster/node.h"
#include "common/config.h"
#include "common/fs.h"
#include "common/log.h"
#include "coordinator/coordinator.h"
#include "data/load.h"
#include "dataservice/batch_stream.h"
#include "dataservice/data_role.h"
#include "launch/threads.h"
#include "ps/protocol.h"
#include "worker/plan_probe.h"

namespace {

using namespace strata;
using bench::Die;
using bench::Median;

void Set(Config& c, const std::string& kv) {
  Status s = c.ApplyOverride(kv);
  if (!s.ok()) Die(kv + ": " + s.ToString());
}

std::unique_ptr<Transport> Tcp(NodeId id) {
  ZmqOptions options;
  auto t = NewZmqTransport(id, options);
  bench::Check(t.status(), "zmq transport");
  bench::Check((*t)->Bind("tcp://127.0.0.1:*"), "bind");
  return std::move(t).value();
}

struct Throughput {
  double batches_per_s = 0;
  double mb_per_s = 0;
  double batch_bytes = 0;
};

// A coordinator, one data server and `workers` clients that only stream.
Throughput ServiceOnce(const Config& config, const DatasetSplits& data,
                       int workers, int64_t batches) {
  Config c = config;
  Set(c, "cluster.data_servers=1");
  Set(c, "cluster.workers=" + std::to_string(workers));
  Set(c, "train.iterations=" + std::to_string(batches));
  auto plan = MakeClusterPlan(c, data);
  if (!plan.ok()) Die(plan.status().ToString());
  // Only what streaming needs: no parameter servers, no evaluator.
  plan->options.roles =
      RoleTable::Make({{Role::kWorker, workers}, {Role::kData, 1}});
  const RoleTable& roles = plan->options.roles;
  CoordinatorOptions co;
  co.roles = roles;
  Coordinator coordinator(co, Tcp(0));
  coordinator.Start();
  const std::string endpoint = coordinator.transport().endpoint();
  std::thread data_thread([&] {
    RoleContext ctx;
    ctx.config = &c;
    ctx.plan = &*plan;
    ctx.role = Role::kData;
    ctx.transport = Tcp(roles.DataServerId(0));
    ctx.coordinator = endpoint;
    ctx.data = &data;
    Status st = RunDataRole(ctx);
    (void)st;
  });
  std::vector<std::thread> clients;
  std::vector<double> spans(workers, 0);
  for (int w = 0; w < workers; ++w) {
    clients.emplace_back([&, w] {
      Node node(Tcp(roles.WorkerId(w)), roles, std::chrono::milliseconds(500),
                std::chrono::milliseconds(5000));
      bench::Check(node.Join(endpoint, std::chrono::milliseconds(60000), "",
                             [](const std::string&) { return Status::Ok(); }),
                   "join");
      BatchStream stream(node.rpc(), roles.DataServerId(0), "data server 0",
                         plan->options.prefetch,
                         std::chrono::milliseconds(60000));
      StreamedBatch b;
      const auto t0 = bench::Clock::now();
      while (true) {
        auto got = stream.Next(&b);
        bench::Check(got.status(), "stream");
        if (!*got) break;
        stream.Ack(b.header.seq, {});
      }
      bench::Check(stream.Flush(), "flush");
      spans[w] = bench::Seconds(t0, bench::Clock::now());
      bench::Check(node.member().ReportDone("{}"), "done");
      node.Leave();
    });
  }
  for (auto& t : clients) t.join();
  while (coordinator.WaitForWorkers(std::chrono::milliseconds(200)).code() ==
         Status::Code::kDeadlineExceeded) {
  }
  Message m;
  m.header.type = MessageType::kStatsRequest;
  auto reply = coordinator.Request(roles.DataServerId(0), std::move(m))
                   ->Wait(std::chrono::milliseconds(10000));
  if (!reply.ok()) Die("data server stats: " + reply.status().ToString());
  coordinator.BroadcastShutdown("");
  data_thread.join();
  coordinator.Stop();
  const auto& p = reply->payloads.at(0);
  auto stats = nlohmann::json::parse(
      std::string(reinterpret_cast<const char*>(p.data()), p.size()));
  Throughput t;
  const double span = *std::max_element(spans.begin(), spans.end());
  const double served = stats["batches"].get<double>();
  t.batches_per_s = served / span;
  t.mb_per_s = stats["bytes"].get<double>() / span / 1e6;
  t.batch_bytes = stats["bytes"].get<double>() / served;
  return t;
}

Throughput RawOnce(size_t batch_bytes, int workers, int64_t batches) {
  bench::RawCluster raw(1, workers, batch_bytes,
                        bench::RawCluster::Threads::kPerNode);
  const double s =
      raw.Run(bench::Op::kPull, batch_bytes, static_cast<int>(batches));
  Throughput t;
  t.batches_per_s = workers * batches / s;
  t.mb_per_s = workers * batches * static_cast<double>(batch_bytes) / s / 1e6;
  t.batch_bytes = static_cast<double>(batch_bytes);
  return t;
}

struct Trained {
  double samples_per_s = 0;
  double wait_fraction = 0;
  double val_acc = 0;
};

Trained TrainOnce(const Config& c, const DatasetSplits& data) {
  auto dir = RunDirectory::Create(c);
  if (!dir.ok()) Die(dir.status().ToString());
  auto s = TrainCluster(c, data, *dir, nullptr);
  if (!s.ok()) Die(s.status().ToString());
  auto j = nlohmann::json::parse(*ReadFile(dir->File("summary.json")));
  Trained t;
  t.samples_per_s = s->samples_per_s;
  t.val_acc = s->final_val_acc;
  if (j.contains("data_service"))
    t.wait_fraction = j["data_service"]["data_wait_fraction"].get<double>();
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  int reps = 3;
  int64_t iterations = 300, batches = 500;
  std::string model = "lenet";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--reps") {
      reps = std::max(1, std::atoi(argv[i + 1]));
    } else if (a == "--iterations") {
      iterations = std::max<int64_t>(1, std::atoll(argv[i + 1]));
    } else if (a == "--batches") {
      batches = std::max<int64_t>(1, std::atoll(argv[i + 1]));
    } else if (a == "--model") {
      model = argv[i + 1];
    } else {
      Die("unknown flag " + a +
          " (--reps N, --iterations N, --batches N, --model NAME)");
    }
  }
  SetLogLevel(LogLevel::kWarning);
  const int workers = 4;
  Config base;
  char tmpl[] = "/tmp/strata_data_service_bench_XXXXXX";
  const char* root = ::mkdtemp(tmpl);
  if (root == nullptr) Die("cannot make a temporary directory");
  Set(base, std::string("run.dir=") + root);
  Set(base, "model.name=" + model);
  Set(base, "cluster.mode=async");
  Set(base, "cluster.servers=1");
  Set(base, "cluster.workers=4");
  Set(base, "cluster.transport=tcp");
  Set(base, "cluster.adapt_hyperparams=false");
  Set(base, "train.batch_size=16");
  Set(base, "train.lr=0.01");
  Set(base, "cluster.threads_per_worker=1");
  Set(base, "eval.every_s=1000");
  Set(base, "train.log_every=50");
  const char* dd = std::getenv("STRATA_DATA_DIR");
  if (dd != nullptr) {
    Set(base, "data.dataset=mnist");
    Set(base, std::string("data.dir=") + dd + "/mnist");
  } else {
    Set(base, "data.synthetic.shape=1x28x28");
    Set(base, "data.synthetic.train_size=20000");
    Set(base, "data.synthetic.val_size=1000");
  }
  auto data = LoadDatasetFromConfig(base);
  if (!data.ok()) Die(data.status().ToString());
  std::printf(
      "data_service_bench: %s, %lld train examples, %d workers, batch 16 "
      "per worker, %d reps, %u hardware threads\n\n",
      data->train.name.c_str(), static_cast<long long>(data->train.size()),
      workers, reps, std::thread::hardware_concurrency());

  // 1. Throughput.
  std::vector<double> ours_b, ours_mb, raw_b, raw_mb, ratio;
  double batch_bytes = 0;
  for (int r = 0; r < reps; ++r) {
    Throughput o = ServiceOnce(base, *data, workers, batches);
    Throughput w =
        RawOnce(static_cast<size_t>(o.batch_bytes), workers, batches);
    batch_bytes = o.batch_bytes;
    ours_b.push_back(o.batches_per_s);
    ours_mb.push_back(o.mb_per_s);
    raw_b.push_back(w.batches_per_s);
    raw_mb.push_back(w.mb_per_s);
    ratio.push_back(o.batches_per_s / w.batches_per_s);
  }
  std::printf(
      "1. service throughput, %d clients x %lld batches of %.0f bytes "
      "(header, features, labels), loopback TCP\n"
      "%-28s %12s %10s\n%-28s %12.0f %10.1f\n%-28s %12.0f %10.1f\n"
      "ours / raw (median of per-rep ratios): %.2f\n\n",
      workers, static_cast<long long>(batches), batch_bytes, "", "batches/s",
      "MB/s", "data service (prefetch 2)", Median(ours_b), Median(ours_mb),
      "raw TCP request/reply", Median(raw_b), Median(raw_mb), Median(ratio));

  // 2. Training.
  Config in_worker = base;
  Set(in_worker, "train.iterations=" + std::to_string(iterations));
  Config stat = in_worker;
  Set(stat, "cluster.data_servers=1");
  Config dyn = stat;
  Set(dyn, "data.assignment=dynamic");
  Config deep = stat;
  Set(deep, "data.prefetch=8");
  struct Row {
    const char* name;
    Config* config;
    std::vector<Trained> runs;
  };
  std::vector<Row> rows = {{"in-worker loading", &in_worker, {}},
                           {"service, static", &stat, {}},
                           {"service, dynamic", &dyn, {}},
                           {"static, prefetch 8", &deep, {}}};
  for (int r = 0; r < reps; ++r) {
    for (size_t k = 0; k < rows.size(); ++k) {
      Row& row = rows[(k + r) % rows.size()];
      row.runs.push_back(TrainOnce(*row.config, *data));
    }
  }
  std::printf(
      "2. training: %s, async, 1 server + %d workers, %lld iterations per "
      "worker, loopback TCP\n%-20s %10s %10s %12s %8s\n",
      model.c_str(), workers, static_cast<long long>(iterations), "", "smp/s",
      "vs in-wk", "data wait %", "val acc");
  for (const Row& row : rows) {
    std::vector<double> sps, wait, acc, vs;
    for (size_t r = 0; r < row.runs.size(); ++r) {
      sps.push_back(row.runs[r].samples_per_s);
      wait.push_back(100 * row.runs[r].wait_fraction);
      acc.push_back(row.runs[r].val_acc);
      vs.push_back(row.runs[r].samples_per_s / rows[0].runs[r].samples_per_s);
    }
    std::printf("%-20s %10.0f %10.2f %12.2f %8.4f\n", row.name, Median(sps),
                Median(vs), Median(wait), Median(acc));
  }
  std::printf(
      "\nvs in-wk: median over reps of the per-rep ratio to in-worker "
      "loading; data wait %%: the workers' time waiting for a batch over "
      "their compute + communication + wait time (summary.json "
      "data_service.data_wait_fraction); targets: vs in-wk >= 0.95, data "
      "wait < 5%%.\n");
  return 0;
}
