#include "train/cluster_run.h"

#include <torch/torch.h>

#include <memory>
#include <thread>

#include "cluster/coordinator.h"
#include "cluster/member.h"
#include "common/log.h"
#include "ps/server.h"
#include "train/batch.h"
#include "train/nodes.h"
#include "transport/inproc_transport.h"
#include "transport/zmq_transport.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Makes transports for the nodes of one in-process cluster.
class TransportFactory {
 public:
  explicit TransportFactory(bool tcp) : tcp_(tcp) {
    if (tcp_) {
      auto ctx = ZmqContext::Create(1);
      if (ctx.ok()) context_ = *ctx;
    }
  }
  Result<std::unique_ptr<Transport>> Make(NodeId id) {
    std::unique_ptr<Transport> t;
    if (tcp_) {
      ZmqOptions zo;
      zo.context = context_;
      ASSIGN_OR_RETURN(t, NewZmqTransport(id, zo));
      RETURN_IF_ERROR(t->Bind("tcp://127.0.0.1:*"));
    } else {
      ASSIGN_OR_RETURN(t, fabric_.NewTransport(id));
      RETURN_IF_ERROR(t->Bind("inproc://*"));
    }
    return t;
  }

 private:
  const bool tcp_;
  InProcFabric fabric_;
  std::shared_ptr<ZmqContext> context_;
};

// One non-coordinator node: its RPC endpoint (owned here for workers and the
// evaluator, by the ParameterServer for servers) and its membership.
struct Node {
  std::unique_ptr<RpcEndpoint> rpc;         // workers, evaluator
  std::unique_ptr<ParameterServer> server;  // servers
  std::unique_ptr<ClusterMember> member;
  RpcEndpoint& endpoint() { return server ? server->rpc() : *rpc; }
};

}  // namespace

Result<RunSummary> TrainCluster(const Config& config, const DatasetSplits& data,
                                const RunDirectory& run_dir,
                                const std::atomic<bool>* stop) {
  const auto start = Clock::now();
  ASSIGN_OR_RETURN(ClusterRunOptions o, ClusterRunOptions::FromConfig(config));
  o.shape.evaluator = true;  // in-process runs always evaluate the final model
  const int n = o.shape.num_workers;
  const int k = o.shape.num_servers;
  int64_t threads = config.GetInt("cluster.threads_per_worker");
  if (threads == 0)
    threads = std::max<int64_t>(1, std::thread::hardware_concurrency() / n);
  torch::set_num_threads(static_cast<int>(threads));

  // The layout needs the parameter count: build the model once here.
  int64_t num_params = 0;
  {
    const ModelOptions mo = ModelOptions::FromConfig(config);
    ASSIGN_OR_RETURN(Model probe, CreateModel(mo, InputSpecOf(data.train)));
    num_params = probe.flat.size();
  }
  ASSIGN_OR_RETURN(KeyLayout layout, KeyLayout::Balanced(num_params, k));
  if (data.train.size() < n) {
    return Status::InvalidArgument(
        "{} training examples cannot feed {} workers", data.train.size(), n);
  }
  const int64_t per_worker_iters =
      o.iterations > 0
          ? o.iterations
          : o.epochs *
                ((data.train.size() / n + o.worker_batch - 1) / o.worker_batch);

  // Every worker runs the same number of iterations (shards differ by at
  // most one example), so sync steps always find all n gradients.
  o.iterations = per_worker_iters;
  const bool tcp = config.GetString("cluster.transport") == "tcp";
  TransportFactory factory(tcp);
  const milliseconds hb_interval(
      config.GetInt("cluster.heartbeat_interval_ms"));
  const milliseconds hb_timeout(config.GetInt("cluster.heartbeat_timeout_ms"));

  CoordinatorOptions co;
  co.shape = o.shape;
  co.heartbeat_timeout = hb_timeout;
  co.staleness = o.staleness;
  co.worker_loss_fatal = o.mode == "sync";
  ASSIGN_OR_RETURN(auto coord_transport, factory.Make(0));
  const std::string coord_endpoint = coord_transport->endpoint();
  Coordinator coordinator(co, std::move(coord_transport));
  coordinator.Start();

  ServerOptions so;
  so.optimizer = OptimizerOptions::FromConfig(config);
  so.schedule = LrSchedule::FromConfig(config, per_worker_iters);
  so.policy.mode =
      o.mode == "sync" ? UpdatePolicy::Mode::kSync : UpdatePolicy::Mode::kAsync;
  so.policy.num_workers = n;
  const int64_t kk = config.GetInt("cluster.updates_per_step");
  so.policy.updates_per_step = kk > 0 ? static_cast<int>(kk) : n;
  so.policy.defer_late = config.GetString("cluster.late_gradients") == "defer";
  so.policy.inverse_staleness =
      config.GetString("cluster.lr_staleness") == "inverse";
  so.policy.rate_scale =
      (o.mode != "sync" && config.GetBool("cluster.adapt_hyperparams"))
          ? 1.0 / n
          : 1.0;

  std::vector<Node> nodes(o.shape.num_nodes());
  for (NodeId id = 1; id < o.shape.num_nodes(); ++id) {
    Node& node = nodes[id];
    ASSIGN_OR_RETURN(auto t, factory.Make(id));
    Role role;
    int index;
    RETURN_IF_ERROR(o.shape.RoleOf(id, &role, &index));
    // The member exists before the endpoint starts, so a shutdown is never
    // missed; it is bound to the endpoint right after.
    if (role == Role::kServer) {
      ServerOptions mine = so;
      mine.range = layout.range(index);
      node.server = std::make_unique<ParameterServer>(
          mine, std::move(t), [&node](Message m) {
            if (node.member) node.member->OnMessage(m);
          });
    } else {
      node.rpc =
          std::make_unique<RpcEndpoint>(std::move(t), [&node](Message m) {
            if (node.member) node.member->OnMessage(m);
          });
    }
    node.member =
        std::make_unique<ClusterMember>(node.endpoint(), o.shape, hb_interval);
    if (node.server)
      node.server->Start();
    else
      node.rpc->Start();
  }

  // Rendezvous: every node registers concurrently; each Join returns once
  // all of them did.
  {
    std::vector<std::thread> joins;
    std::vector<Status> results(nodes.size());
    for (NodeId id = 1; id < o.shape.num_nodes(); ++id) {
      joins.emplace_back([&, id] {
        results[id] = nodes[id].member->Join(coord_endpoint, o.request_timeout);
      });
    }
    for (auto& t : joins) t.join();
    for (NodeId id = 1; id < o.shape.num_nodes(); ++id) {
      if (!results[id].ok()) return results[id];
    }
  }
  for (NodeId id = 1; id < o.shape.num_nodes(); ++id)
    nodes[id].member->StartHeartbeats();
  std::vector<NodeId> server_ids;
  for (int s = 0; s < k; ++s) server_ids.push_back(o.shape.ServerId(s));

  LogInfo(
      "cluster: mode {}, {} servers, {} workers over {}; {} parameters ({}); "
      "per-worker batch {}, {} iterations per worker",
      o.mode, k, n, tcp ? "tcp (loopback)" : "the in-process transport",
      num_params, layout.ToString(), o.worker_batch, per_worker_iters);

  // Workers and the evaluator.
  std::atomic<bool> workers_stop{false};
  std::vector<Result<WorkerMetrics>> results(
      n, Status::Internal("worker did not run"));
  std::vector<std::thread> threads_list;
  std::vector<std::unique_ptr<PsClient>> clients;
  for (int w = 0; w < n; ++w) {
    NodeId id = o.shape.WorkerId(w);
    clients.push_back(
        std::make_unique<PsClient>(nodes[id].endpoint(), layout, server_ids));
  }
  for (int w = 0; w < n; ++w) {
    NodeId id = o.shape.WorkerId(w);
    threads_list.emplace_back([&, w, id] {
      results[w] =
          RunWorker(config, o, w, data.train, ModShard(data.train.size(), w, n),
                    *clients[w], *nodes[id].member, &run_dir, &workers_stop);
      if (!results[w].ok()) {
        LogError("worker {}: {}", w, results[w].status().message());
        // Stop heartbeats so the coordinator sees this worker as lost.
        nodes[id].member->StopHeartbeats();
      }
    });
  }
  const NodeId eval_id = o.shape.EvaluatorId();
  PsClient eval_client(nodes[eval_id].endpoint(), layout, server_ids);
  std::atomic<bool> eval_done{false};
  Status eval_status;
  std::thread evaluator([&] {
    if (!config.GetBool("cluster.evaluator")) return;
    eval_status =
        RunEvaluator(config, o, data, eval_client, &run_dir, &eval_done, start);
  });

  // Wait for the workers, watching for Ctrl-C and failures.
  Status run_status;
  bool interrupted = false;
  while (true) {
    run_status = coordinator.WaitForWorkers(milliseconds(200));
    if (run_status.code() != Status::Code::kDeadlineExceeded) break;
    if (stop != nullptr && stop->load() && !interrupted) {
      interrupted = true;
      workers_stop = true;
      LogWarning(
          "interrupted: stopping the workers, then evaluating and writing the "
          "summary");
    }
  }
  if (!run_status.ok()) {
    workers_stop = true;
    coordinator.BroadcastShutdown(run_status.message());
  }
  for (auto& t : threads_list) t.join();
  eval_done = true;
  evaluator.join();

  // Final evaluation of the global model.
  RunSummary s;
  const ModelOptions mo = ModelOptions::FromConfig(config);
  ASSIGN_OR_RETURN(Model final_model, CreateModel(mo, InputSpecOf(data.train)));
  auto pulled = eval_client.Pull(final_model.flat.param_data(), {})
                    ->Wait(o.request_timeout);
  nlohmann::json summary;
  if (pulled.ok()) {
    ASSIGN_OR_RETURN(EvalResult tr,
                     Evaluate(*final_model.net, data.train, o.eval_batch));
    ASSIGN_OR_RETURN(EvalResult va,
                     Evaluate(*final_model.net, data.val, o.eval_batch));
    s.final_train_loss = tr.loss;
    s.final_train_acc = tr.accuracy;
    s.final_val_loss = va.loss;
    s.final_val_acc = va.accuracy;
    s.final_params.assign(
        final_model.flat.param_data(),
        final_model.flat.param_data() + final_model.flat.size());
    nlohmann::json j{
        {"step", per_worker_iters},
        {"version", pulled->versions[0]},
        {"wall_s", std::chrono::duration<double>(Clock::now() - start).count()},
        {"val_loss", va.loss},
        {"val_acc", va.accuracy},
        {"final", true}};
    RETURN_IF_ERROR(run_dir.AppendJson("eval.jsonl", j));
  }

  // Per-worker metrics and server statistics.
  nlohmann::json workers = nlohmann::json::array();
  double train_wall =
      std::chrono::duration<double>(Clock::now() - start).count();
  for (int w = 0; w < n; ++w) {
    if (results[w].ok()) {
      s.samples += results[w]->samples;
      s.steps = std::max(s.steps, results[w]->iterations);
      workers.push_back(results[w]->ToJson());
    } else {
      workers.push_back(
          {{"worker", w}, {"error", results[w].status().message()}});
    }
  }
  nlohmann::json servers = nlohmann::json::array();
  for (int srv = 0; srv < k; ++srv) {
    servers.push_back(nlohmann::json::parse(
        nodes[o.shape.ServerId(srv)].server->StatsJson()));
  }
  // Every gradient reaches every server; server 0's counts are the run's.
  ShardStats st0 = nodes[o.shape.ServerId(0)].server->stats();
  nlohmann::json staleness = nlohmann::json::object();
  for (const auto& [key, v] : st0.staleness) staleness[std::to_string(key)] = v;

  std::vector<std::string> lost = coordinator.LostNodes();
  coordinator.BroadcastShutdown("");
  for (NodeId id = 1; id < o.shape.num_nodes(); ++id)
    nodes[id].member->StopHeartbeats();
  coordinator.Stop();
  for (NodeId id = 1; id < o.shape.num_nodes(); ++id) {
    if (nodes[id].server)
      nodes[id].server->Stop();
    else
      nodes[id].rpc->Stop();
  }

  s.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  s.train_s = train_wall;
  s.samples_per_s = train_wall > 0 ? s.samples / train_wall : 0;
  s.epochs = static_cast<double>(s.samples) / data.train.size();
  s.parameters = num_params;
  s.interrupted = interrupted;
  summary = s.ToJson();
  summary["model"] = mo.name;
  summary["dataset"] = data.train.name;
  summary["mode"] = o.mode;
  summary["servers"] = k;
  summary["workers_count"] = n;
  summary["worker_batch"] = o.worker_batch;
  summary["transport"] = tcp ? "tcp" : "inproc";
  summary["workers"] = workers;
  summary["servers_stats"] = servers;
  summary["staleness_histogram"] = staleness;
  summary["dropped_gradients"] = st0.dropped;
  summary["deferred_gradients"] = st0.deferred;
  summary["updates"] = st0.updates;
  nlohmann::json per_update = nlohmann::json::object();
  for (const auto& [key, v] : st0.gradients_per_update)
    per_update[std::to_string(key)] = v;
  summary["gradients_per_update"] = per_update;
  summary["tail_updates"] = st0.tail_updates;
  summary["lost_workers"] = lost;
  if (!run_status.ok()) summary["error"] = run_status.message();
  RETURN_IF_ERROR(run_dir.WriteJson("summary.json", summary));
  if (!run_status.ok()) return run_status;
  if (!eval_status.ok()) LogWarning("evaluator: {}", eval_status.message());
  return s;
}

}  // namespace strata
