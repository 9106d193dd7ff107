// A cluster from the LibTorch-free libraries alone (strata_coordinator,
// strata_server, strata_dataservice, strata_exchange): the coordinator, a
// parameter server and a data server run their real roles; the worker is
// the real push/pull exchange and batch stream around a gradient computed
// by hand (no model). This binary links no LibTorch: the test checks that
// none is loaded, and tests/CMakeLists.txt runs ldd on it.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "cluster/node.h"
#include "coordinator/coordinator_role.h"
#include "data/load.h"
#include "data/test_util.h"
#include "dataservice/batch_stream.h"
#include "dataservice/data_role.h"
#include "exchange/exchange.h"
#include "run/run_facts.h"
#include "server/server_role.h"
#include "transport/factory.h"

namespace strata {
namespace {

using std::chrono::milliseconds;

constexpr int64_t kParams = 8;
constexpr int64_t kSteps = 20;

Config TestConfig(const std::string& root) {
  Config c;
  for (const std::string& kv : std::vector<std::string>{
           "cluster.mode=sync", "cluster.servers=1", "cluster.workers=1",
           "cluster.data_servers=1", "train.iterations=20", "train.lr=0.25",
           "train.batch_size=16", "data.synthetic.train_size=256",
           "data.synthetic.val_size=32", "data.synthetic.dim=4",
           "run.dir=" + root}) {
    EXPECT_TRUE(c.ApplyOverride(kv).ok()) << kv;
  }
  return c;
}

// The worker's side by hand: the real exchange and batch stream, and for a
// gradient params - 1 (so SGD moves every parameter towards 1).
Status FakeWorker(const ClusterPlan& plan, std::unique_ptr<Transport> t,
                  const std::string& coordinator, int64_t* batches) {
  const ClusterRunOptions& o = plan.options;
  Node node(std::move(t), o.roles, o.heartbeat_interval, o.heartbeat_timeout);
  RETURN_IF_ERROR(
      node.Join(coordinator, o.request_timeout, RunFacts::Of(plan).ToText()));
  std::vector<float> params(kParams, 0.0f), grads(kParams, 0.0f);
  Mutex mu;
  WorkerMetrics metrics;
  ExchangeEnv env;
  env.options = &o;
  env.model = {params.data(), grads.data(), kParams, nullptr};
  env.rpc = &node.rpc();
  env.member = &node.member();
  env.layout = &plan.layout;
  env.optimizer = o.optimizer;
  env.schedule = o.schedule.ForSteps(o.iterations);
  env.metrics = &metrics;
  env.params_mu = &mu;
  ASSIGN_OR_RETURN(std::unique_ptr<Exchange> exchange, MakeExchange(env));
  RETURN_IF_ERROR(exchange->Start());
  RETURN_IF_ERROR(node.member().Barrier(0, o.request_timeout));
  BatchStream stream(node.rpc(), o.roles.DataServerId(0), "data server 0",
                     o.prefetch, o.request_timeout);
  for (int64_t it = 0; it < o.iterations; ++it) {
    RETURN_IF_ERROR(exchange->BeforeStep(it));
    StreamedBatch batch;
    ASSIGN_OR_RETURN(bool got, stream.Next(&batch));
    if (!got) break;
    ++*batches;
    stream.Ack(batch.header.seq, {});
    for (int64_t i = 0; i < kParams; ++i) grads[i] = params[i] - 1.0f;
    RETURN_IF_ERROR(exchange->AfterStep(it));
    metrics.iterations = it + 1;
  }
  RETURN_IF_ERROR(stream.Flush());
  RETURN_IF_ERROR(exchange->Finish(metrics.iterations));
  Status done = node.member().ReportDone(metrics.ToWire().dump());
  node.Leave();
  return done;
}

// Whether a LibTorch library is mapped into this process.
bool LibTorchLoaded() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("libtorch") != std::string::npos ||
        line.find("libc10") != std::string::npos)
      return true;
  }
  return false;
}

TEST(TorchFreeClusterTest, CoordinatorServerAndDataServerRunWithoutLibTorch) {
  const testing::TempDir dir;
  const Config config = TestConfig(dir.path());
  auto data = LoadDatasetFromConfig(config);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  auto run_dir = RunDirectory::Create(config);
  ASSERT_TRUE(run_dir.ok()) << run_dir.status().ToString();
  ClusterPlan plan;
  auto options = ClusterRunOptions::FromConfig(config);
  ASSERT_TRUE(options.ok()) << options.status().ToString();
  plan.options = *options;
  // No evaluator: it would need a model.
  plan.options.roles = RoleTable::Standard(1, 1, /*evaluator=*/false, 1);
  ModelShape shape;
  shape.num_params = kParams;
  shape.tensor_ends = {kParams};
  ASSERT_TRUE(plan.Shape(shape).ok());
  auto shards = ResolveShards(config, data->train, 1);
  ASSERT_TRUE(shards.ok()) << shards.status().ToString();
  plan.shards = std::make_shared<const ShardSet>(std::move(*shards));
  const RoleTable& roles = plan.options.roles;
  InProcFabric fabric;
  TransportOptions to;
  to.fabric = &fabric;
  std::vector<RoleContext> contexts(roles.num_nodes());
  for (NodeId id = 0; id < roles.num_nodes(); ++id) {
    RoleContext& ctx = contexts[id];
    ASSERT_TRUE(roles.RoleOf(id, &ctx.role, &ctx.index).ok());
    auto t = NewBoundTransport(id, "inproc://*", to);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    ctx.transport = std::move(*t);
    ctx.config = &config;
    ctx.plan = &plan;
    ctx.coordinator = contexts[0].transport->endpoint();
    ctx.run_dir = &*run_dir;
    ctx.data = &*data;
  }
  std::optional<ClusterSummary> summary;
  contexts[0].summary = &summary;
  std::vector<Status> results(contexts.size());
  int64_t batches = 0;
  std::vector<std::thread> threads;
  for (size_t i = 0; i < contexts.size(); ++i) {
    threads.emplace_back([&, i] {
      RoleContext& ctx = contexts[i];
      switch (ctx.role) {
        case Role::kCoordinator:
          results[i] = RunCoordinatorRole(ctx);
          break;
        case Role::kServer:
          results[i] = RunServerRole(ctx);
          break;
        case Role::kData:
          results[i] = RunDataRole(ctx);
          break;
        default:
          results[i] = FakeWorker(plan, std::move(ctx.transport),
                                  ctx.coordinator, &batches);
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(results[0].ok()) << results[0].ToString();
  for (size_t i = 1; i < results.size(); ++i)
    EXPECT_TRUE(results[i].ok())
        << contexts[i].who() << ": " << results[i].ToString();
  EXPECT_EQ(batches, kSteps);
  ASSERT_TRUE(summary.has_value());
  EXPECT_EQ(summary->steps, kSteps);
  ASSERT_EQ(summary->servers_stats.size(), 1u);
  // Sync with one worker: one update of the server's range per step.
  EXPECT_EQ(summary->servers_stats[0].updates, kSteps);
  ASSERT_TRUE(summary->data_service.has_value());
  ASSERT_EQ(summary->data_service->data_servers.size(), 1u);
  EXPECT_EQ(summary->data_service->data_servers[0].acked, kSteps);
  EXPECT_FALSE(LibTorchLoaded());
}

}  // namespace
}  // namespace strata
