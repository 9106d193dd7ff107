#include "train/roles.h"

#include <thread>

#include "cluster/coordinator.h"
#include "cluster/member.h"
#include "common/log.h"
#include "ps/client.h"
#include "ps/protocol.h"
#include "ps/server.h"
#include "sharding/report.h"
#include "train/batch.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The evaluator's end-of-run exchange with the coordinator.
constexpr MessageType kFinalEvalRequest = static_cast<MessageType>(
    static_cast<uint16_t>(MessageType::kFirstUserType) + 3);
constexpr MessageType kFinalEvalReply = static_cast<MessageType>(
    static_cast<uint16_t>(MessageType::kFirstUserType) + 4);

milliseconds HeartbeatInterval(const Config& c) {
  return milliseconds(c.GetInt("cluster.heartbeat_interval_ms"));
}
milliseconds HeartbeatTimeout(const Config& c) {
  return milliseconds(c.GetInt("cluster.heartbeat_timeout_ms"));
}

std::vector<NodeId> ServerIds(const ClusterShape& shape) {
  std::vector<NodeId> ids;
  for (int s = 0; s < shape.num_servers; ++s) ids.push_back(shape.ServerId(s));
  return ids;
}

// Sync k-of-n with several servers: server 0 chooses each step's gradients
// and the others follow (shard.h, UpdatePolicy::follower).
bool LeaderFirst(const ClusterRunOptions& o, const Config& c) {
  const int64_t k = c.GetInt("cluster.updates_per_step");
  return o.mode == "sync" && k > 0 && k < o.shape.num_workers &&
         o.shape.num_servers > 1;
}

std::string Text(const Message& m) {
  return m.payloads.empty() ? "" : ErrorText(m);
}

nlohmann::json ParseOr(const std::string& text, nlohmann::json fallback) {
  try {
    return nlohmann::json::parse(text);
  } catch (const std::exception&) {
    return fallback;
  }
}

// Waits for the coordinator to say stop (or lose it); bounded by the
// member's own coordinator-loss detection.
void WaitForEnd(ClusterMember& member) {
  while (!member.WaitForShutdown(milliseconds(200))) {
  }
}

}  // namespace

Result<ClusterPlan> ClusterPlan::Make(const Config& config,
                                      const DatasetSplits& data,
                                      bool resolve_shards) {
  ClusterPlan plan;
  ASSIGN_OR_RETURN(plan.options, ClusterRunOptions::FromConfig(config));
  const int n = plan.options.shape.num_workers;
  if (data.train.size() < n) {
    return Status::InvalidArgument(
        "{} training examples cannot feed {} workers", data.train.size(), n);
  }
  ASSIGN_OR_RETURN(Model probe, CreateModel(ModelOptions::FromConfig(config),
                                            InputSpecOf(data.train)));
  plan.num_params = probe.flat.size();
  ASSIGN_OR_RETURN(
      plan.layout,
      KeyLayout::Balanced(plan.num_params, plan.options.shape.num_servers));
  ClusterRunOptions& o = plan.options;
  if (resolve_shards) {
    ASSIGN_OR_RETURN(ShardSet shards, ResolveShards(config, data.train, n));
    for (int w = 0; w < n; ++w) {
      if (shards.worker_indices[w].empty()) {
        return Status::InvalidArgument(
            "worker {} of {} has no examples with sharding method '{}'", w, n,
            ShardMethodName(shards.plan.options.method));
      }
    }
    plan.shards = std::make_shared<const ShardSet>(std::move(shards));
  }
  if (o.iterations <= 0) {
    // Every worker runs the same count (sync steps always find n
    // gradients), and every node derives it without the shards: an epoch
    // is N / n examples per worker, whatever the sharding method, so
    // methods are compared on the same number of samples. (A shard with
    // broadcast examples is larger than N / n; docs/sharding.md.)
    const int64_t shard = data.train.size() / n;
    o.iterations = o.epochs * ((shard + o.worker_batch - 1) / o.worker_batch);
  }
  return plan;
}

Result<nlohmann::json> RunCoordinatorRole(const Config& config,
                                          const ClusterRunOptions& o,
                                          std::unique_ptr<Transport> transport,
                                          const RunDirectory& run_dir,
                                          const std::atomic<bool>* stop) {
  const auto start = Clock::now();
  CoordinatorOptions co;
  co.shape = o.shape;
  co.heartbeat_timeout = HeartbeatTimeout(config);
  co.join_timeout = o.request_timeout;
  co.staleness = o.staleness;
  co.worker_loss_fatal = o.mode == "sync";
  Coordinator coordinator(co, std::move(transport));
  coordinator.Start();

  Status run_status;
  bool interrupted = false;
  while (true) {
    run_status = coordinator.WaitForWorkers(milliseconds(200));
    if (run_status.code() != Status::Code::kDeadlineExceeded) break;
    if (stop != nullptr && stop->load() && !interrupted) {
      interrupted = true;
      LogWarning(
          "interrupted: stopping the workers, then evaluating and writing the "
          "summary");
      coordinator.StopWorkers();
    }
  }
  const double train_s =
      std::chrono::duration<double>(Clock::now() - start).count();
  const std::vector<NodeId> lost_ids = coordinator.LostIds();
  auto is_lost = [&](NodeId id) {
    return std::find(lost_ids.begin(), lost_ids.end(), id) != lost_ids.end();
  };
  if (!run_status.ok()) {
    // Release the workers blocked on the failed step at once.
    for (int w = 0; w < o.shape.num_workers; ++w) {
      Message m;
      m.header.type = MessageType::kShutdown;
      m.header.flags |= kShutdownError;
      m.payloads.push_back(Buffer::CopyOf(run_status.message().data(),
                                          run_status.message().size()));
      (void)coordinator.Request(o.shape.WorkerId(w), std::move(m));
    }
  }

  // Gather: servers' statistics, workers' reports, the final evaluation.
  nlohmann::json servers = nlohmann::json::array();
  for (int s = 0; s < o.shape.num_servers; ++s) {
    if (is_lost(o.shape.ServerId(s))) continue;
    Message m;
    m.header.type = kStatsRequest;
    auto reply = coordinator.Request(o.shape.ServerId(s), std::move(m))
                     ->Wait(milliseconds(10000));
    if (reply.ok())
      servers.push_back(ParseOr(Text(*reply), nlohmann::json::object()));
    else
      LogWarning("no statistics from server {}: {}", s,
                 reply.status().message());
  }
  nlohmann::json final_eval = nlohmann::json::object();
  if (run_status.ok() && o.shape.evaluator && !is_lost(o.shape.EvaluatorId())) {
    Message m;
    m.header.type = kFinalEvalRequest;
    auto reply = coordinator.Request(o.shape.EvaluatorId(), std::move(m))
                     ->Wait(o.request_timeout);
    if (reply.ok())
      final_eval = ParseOr(Text(*reply), final_eval);
    else
      LogWarning("no final evaluation: {}", reply.status().message());
  }
  coordinator.BroadcastShutdown(run_status.ok() ? "" : run_status.message());

  const auto reports = coordinator.DoneReports();
  nlohmann::json workers = nlohmann::json::array();
  int64_t samples = 0, steps = 0;
  for (int w = 0; w < o.shape.num_workers; ++w) {
    auto it = reports.find(o.shape.WorkerId(w));
    nlohmann::json r =
        it == reports.end()
            ? nlohmann::json{{"worker", w}, {"error", "no report (lost)"}}
            : ParseOr(it->second, nlohmann::json::object());
    samples += r.value("samples", int64_t{0});
    steps = std::max(steps, r.value("iterations", int64_t{0}));
    workers.push_back(r);
  }
  nlohmann::json s0 = servers.empty() ? nlohmann::json::object() : servers[0];
  nlohmann::json summary = final_eval;
  summary["wall_s"] =
      std::chrono::duration<double>(Clock::now() - start).count();
  summary["train_s"] = train_s;
  summary["samples"] = samples;
  summary["steps"] = steps;
  summary["samples_per_s"] = train_s > 0 ? samples / train_s : 0.0;
  summary["interrupted"] = interrupted;
  summary["model"] = config.GetString("model.name");
  summary["dataset"] = config.GetString("data.dataset");
  summary["mode"] = o.mode;
  summary["servers"] = o.shape.num_servers;
  summary["workers_count"] = o.shape.num_workers;
  summary["worker_batch"] = o.worker_batch;
  summary["iterations_per_worker"] = o.iterations;
  summary["workers"] = workers;
  summary["servers_stats"] = servers;
  // Every gradient reaches every server; server 0's counts are the run's.
  summary["staleness_histogram"] =
      s0.value("staleness", nlohmann::json::object());
  summary["dropped_gradients"] = s0.value("dropped", int64_t{0});
  summary["deferred_gradients"] = s0.value("deferred", int64_t{0});
  summary["updates"] = s0.value("updates", int64_t{0});
  summary["gradients_per_update"] =
      s0.value("gradients_per_update", nlohmann::json::object());
  summary["tail_updates"] = s0.value("tail_updates", int64_t{0});
  summary["lost_workers"] = coordinator.LostNodes();
  if (!run_status.ok()) summary["error"] = run_status.message();
  Status written = run_dir.WriteJson("summary.json", summary);
  coordinator.Stop();
  if (!run_status.ok()) return run_status;
  RETURN_IF_ERROR(written);
  return summary;
}

Status RunServerRole(const Config& config, const ClusterPlan& plan, int index,
                     std::unique_ptr<Transport> transport,
                     const std::string& coordinator_endpoint,
                     const std::atomic<bool>* stop) {
  const ClusterRunOptions& o = plan.options;
  const int n = o.shape.num_workers;
  ServerOptions so;
  so.range = plan.layout.range(index);
  so.optimizer = OptimizerOptions::FromConfig(config);
  so.schedule = LrSchedule::FromConfig(config, o.iterations);
  so.policy.mode =
      o.mode == "sync" ? UpdatePolicy::Mode::kSync : UpdatePolicy::Mode::kAsync;
  so.policy.num_workers = n;
  const int64_t k = config.GetInt("cluster.updates_per_step");
  so.policy.updates_per_step = k > 0 ? static_cast<int>(k) : n;
  so.policy.defer_late = config.GetString("cluster.late_gradients") == "defer";
  so.policy.inverse_staleness =
      config.GetString("cluster.lr_staleness") == "inverse";
  so.policy.rate_scale =
      (o.mode != "sync" && config.GetBool("cluster.adapt_hyperparams"))
          ? 1.0 / n
          : 1.0;
  so.policy.follower = LeaderFirst(o, config) && index > 0;

  ClusterMember* member_ptr = nullptr;
  ParameterServer server(so, std::move(transport), [&member_ptr](Message m) {
    if (member_ptr != nullptr) member_ptr->OnMessage(m);
  });
  ClusterMember member(server.rpc(), o.shape, HeartbeatInterval(config),
                       HeartbeatTimeout(config));
  member_ptr = &member;
  server.Start();
  Status joined = member.Join(coordinator_endpoint, o.request_timeout);
  if (joined.ok()) {
    member.StartHeartbeats();
    WaitForEnd(member);
  }
  (void)stop;  // servers serve until the coordinator ends the run
  member.StopHeartbeats();
  server.Stop();
  if (!joined.ok()) return joined;
  if (!member.shutdown_reason().empty())
    return Status::Unavailable("{}", member.shutdown_reason());
  return Status::Ok();
}

Result<WorkerMetrics> RunWorkerRole(const Config& config,
                                    const ClusterPlan& plan, int index,
                                    const DatasetSplits& data,
                                    std::unique_ptr<Transport> transport,
                                    const std::string& coordinator_endpoint,
                                    const RunDirectory* run_dir,
                                    const std::atomic<bool>* stop) {
  const ClusterRunOptions& o = plan.options;
  if (!plan.shards) {
    return Status::FailedPrecondition(
        "worker {}: the cluster plan was made without shards", index);
  }
  if (index == 0 && run_dir != nullptr) {
    // The shard report goes into the run directory (docs/sharding.md).
    RETURN_IF_ERROR(WriteShardReport(plan.shards->report,
                                     run_dir->path() + "/shard_report.json"));
  }
  ClusterMember* member_ptr = nullptr;
  RpcEndpoint rpc(std::move(transport), [&member_ptr](Message m) {
    if (member_ptr != nullptr) member_ptr->OnMessage(m);
  });
  ClusterMember member(rpc, o.shape, HeartbeatInterval(config),
                       HeartbeatTimeout(config));
  member_ptr = &member;
  rpc.Start();
  RETURN_IF_ERROR(member.Join(coordinator_endpoint, o.request_timeout));
  member.StartHeartbeats();
  PsClient client(rpc, plan.layout, ServerIds(o.shape), LeaderFirst(o, config));
  auto metrics = RunWorker(config, o, index, data.train, *plan.shards, client,
                           member, run_dir, stop);
  if (!metrics.ok()) {
    // Go silent, like a crashed process: the coordinator's heartbeat
    // monitor decides what the loss means for the run.
    LogError("worker {}: {}", index, metrics.status().message());
    member.StopHeartbeats();
    rpc.Stop();
    return metrics.status();
  }
  Status done = member.ReportDone(metrics->ToJson().dump());
  member.StopHeartbeats();
  rpc.Stop();
  RETURN_IF_ERROR(done);
  return metrics;
}

Status RunEvaluatorRole(const Config& config, const ClusterPlan& plan,
                        const DatasetSplits& data,
                        std::unique_ptr<Transport> transport,
                        const std::string& coordinator_endpoint,
                        const RunDirectory* run_dir,
                        const std::atomic<bool>* stop,
                        std::vector<float>* final_params) {
  const ClusterRunOptions& o = plan.options;
  const auto start = Clock::now();
  ClusterMember* member_ptr = nullptr;
  std::atomic<bool> done{false};
  std::mutex final_mu;
  std::unique_ptr<Message> final_request;  // GUARDED_BY(final_mu)
  RpcEndpoint rpc(std::move(transport), [&](Message m) {
    if (m.header.type == kFinalEvalRequest) {
      std::lock_guard<std::mutex> lock(final_mu);
      final_request = std::make_unique<Message>(std::move(m));
      done = true;
      return;
    }
    if (member_ptr != nullptr) member_ptr->OnMessage(m);
    if (m.header.type == MessageType::kShutdown) done = true;
  });
  ClusterMember member(rpc, o.shape, HeartbeatInterval(config),
                       HeartbeatTimeout(config));
  member_ptr = &member;
  rpc.Start();
  RETURN_IF_ERROR(member.Join(coordinator_endpoint, o.request_timeout));
  member.StartHeartbeats();
  PsClient client(rpc, plan.layout, ServerIds(o.shape));
  Status status;
  if (config.GetBool("cluster.evaluator")) {
    status = RunEvaluator(config, o, data, client, run_dir, &done, start);
  }
  // The final evaluation, when the coordinator asks for it.
  while (status.ok() && !member.shutdown_requested()) {
    std::unique_ptr<Message> request;
    {
      std::lock_guard<std::mutex> lock(final_mu);
      request = std::move(final_request);
    }
    if (request == nullptr) {
      member.WaitForShutdown(milliseconds(50));
      continue;
    }
    nlohmann::json result;
    auto model =
        CreateModel(ModelOptions::FromConfig(config), InputSpecOf(data.train));
    if (!model.ok()) {
      status = model.status();
      break;
    }
    auto pulled =
        client.Pull(model->flat.param_data(), {})->Wait(o.request_timeout);
    if (!pulled.ok()) {
      status = pulled.status().WithContext("final pull");
      (void)rpc.ReplyError(*request, status);
      break;
    }
    auto recalibrated = RecalibrateBatchNorm(*model->net, data.train,
                                             o.eval_batch, kBatchNormExamples);
    if (!recalibrated.ok()) {
      status = recalibrated.status();
      (void)rpc.ReplyError(*request, status);
      break;
    }
    auto tr = Evaluate(*model->net, data.train, o.eval_batch);
    auto va = Evaluate(*model->net, data.val, o.eval_batch);
    if (!tr.ok() || !va.ok()) {
      status = !tr.ok() ? tr.status() : va.status();
      (void)rpc.ReplyError(*request, status);
      break;
    }
    if (final_params != nullptr) {
      final_params->assign(model->flat.param_data(),
                           model->flat.param_data() + model->flat.size());
    }
    result = {{"final_train_loss", tr->loss},
              {"final_train_acc", tr->accuracy},
              {"final_val_loss", va->loss},
              {"final_val_acc", va->accuracy},
              {"final_version", pulled->versions[0]},
              {"parameters", plan.num_params}};
    if (run_dir != nullptr) {
      (void)run_dir->AppendJson(
          "eval.jsonl",
          {{"step", o.iterations},
           {"version", pulled->versions[0]},
           {"wall_s",
            std::chrono::duration<double>(Clock::now() - start).count()},
           {"val_loss", va->loss},
           {"val_acc", va->accuracy},
           {"final", true}});
    }
    LogInfo(
        "final model (version {}): train loss {:.4f} acc {:.4f} | val loss "
        "{:.4f} acc {:.4f}",
        pulled->versions[0], tr->loss, tr->accuracy, va->loss, va->accuracy);
    Message reply;
    reply.header.type = kFinalEvalReply;
    const std::string text = result.dump();
    reply.payloads.push_back(Buffer::CopyOf(text.data(), text.size()));
    (void)rpc.Reply(*request, std::move(reply));
    WaitForEnd(member);
  }
  (void)stop;  // the evaluator ends with the run
  member.StopHeartbeats();
  rpc.Stop();
  return status;
}

}  // namespace strata
