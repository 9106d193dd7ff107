#include "train/roles.h"

#include <algorithm>
#include <thread>

#include "cluster/cluster_metrics.h"
#include "cluster/coordinator.h"
#include "cluster/mailbox.h"
#include "cluster/member.h"
#include "cluster/node.h"
#include "common/log.h"
#include "metrics/http_server.h"
#include "ps/client.h"
#include "ps/protocol.h"
#include "ps/server.h"
#include "ps/server_group.h"
#include "sharding/report.h"
#include "train/batch.h"
#include "train/checkpoint.h"
#include "train/data_service.h"
#include "train/model_file.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The evaluator's end-of-run exchange with the coordinator.
constexpr MessageType kFinalEvalRequest = static_cast<MessageType>(
    static_cast<uint16_t>(MessageType::kFirstUserType) + 3);
constexpr MessageType kFinalEvalReply = static_cast<MessageType>(
    static_cast<uint16_t>(MessageType::kFirstUserType) + 4);

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

// True for the modes whose workers move in lockstep: a checkpoint finds
// them all at one step (docs/checkpoints.md).
bool Lockstep(RunMode mode) {
  return mode == RunMode::kSync ||
         FamilyOf(mode) == ExchangeFamily::kCollective;
}

// The coordinator's side of cluster checkpoints: writes a round's
// checkpoint (every worker's state from its arrival, or its last one for a
// worker that finished, and every server's state, asked for now) and hands
// each node its state when the run resumes. Used on the coordinator's
// checkpoint thread (Write) and receive thread (Restore), never at once
// on the same data: Write runs only after every node restored.
class ClusterCheckpoints {
 public:
  ClusterCheckpoints(const Config& config, const ClusterRunOptions& o,
                     const RunDirectory& run_dir)
      : config_(config), o_(o), run_dir_(run_dir) {}

  // Loads the newest checkpoint to resume from (checkpoint.resume) and
  // checks that it is a checkpoint of this cluster; says so with
  // `announce`.
  // `loaded`: that checkpoint, already read (CheckResumable); it is
  // checked again here, not read again.
  Status Load(bool announce = true,
              std::shared_ptr<const Checkpoint> loaded = nullptr) {
    if (loaded == nullptr) {
      ASSIGN_OR_RETURN(Checkpoint c, LoadNewestCheckpoint(run_dir_.path()));
      loaded = std::make_shared<const Checkpoint>(std::move(c));
    }
    const Checkpoint& c = *loaded;
    ASSIGN_OR_RETURN(const std::string* saved, c.File("config.toml"));
    RETURN_IF_ERROR(CheckResumeConfig(*saved, config_));
    auto coord = c.File("coordinator.json");
    if (!coord.ok()) {
      return Status::FailedPrecondition(
          "{} is not a cluster checkpoint (it has no coordinator.json)", c.dir);
    }
    meta_ = ParseOr(**coord, nlohmann::json());
    if (!meta_.is_object()) {
      return Status::DataLoss("{}/coordinator.json: bad JSON", c.dir);
    }
    resume_ = std::move(loaded);
    if (announce)
      LogInfo("resuming from {} (step {})", resume_->dir, resume_->step);
    return Status::Ok();
  }
  bool resuming() const { return resume_ != nullptr; }
  const std::shared_ptr<const Checkpoint>& loaded() const { return resume_; }
  const std::string& dir() const { return resume_->dir; }
  int64_t step() const { return resume_ ? resume_->step : 0; }
  // Training seconds before the resumed checkpoint.
  double prior_train_s() const {
    return meta_.is_object() ? meta_.value("train_s", 0.0) : 0.0;
  }

  // The reply to node `id`'s kRestoreRequest.
  Message Restore(NodeId id) const {
    Message m;
    Role role;
    int index;
    if (!o_.roles.RoleOf(id, &role, &index).ok()) return m;
    std::string name;
    if (role == Role::kWorker) name = fmt::format("worker-{}", index);
    if (role == Role::kServer) name = fmt::format("server-{}", index);
    if (role == Role::kData) name = fmt::format("data-{}", index);
    if (name.empty()) return m;
    // A server replacing a lost one (cluster.restart) after this run wrote
    // checkpoints takes the newest; at the start, the one resumed from.
    std::unique_ptr<Checkpoint> newest;
    const Checkpoint* c = resume_.get();
    if (written_.load() > 0) {
      auto loaded = LoadNewestCheckpoint(run_dir_.path());
      if (!loaded.ok()) {
        LogError("restart: {}", loaded.status().message());
        return m;
      }
      newest = std::make_unique<Checkpoint>(std::move(loaded).value());
      c = newest.get();
    }
    if (c == nullptr) return m;
    auto json = c->File(name + ".json");
    // Data servers keep no tensors.
    auto tensors = role == Role::kData ? json : c->File(name + ".safetensors");
    if (!json.ok() || !tensors.ok()) {
      LogError("resume: {} has no state for {}", c->dir, o_.roles.Describe(id));
      return m;
    }
    if (written_.load() > 0)
      LogWarning("{} starts again from {}", o_.roles.Describe(id), c->dir);
    m.header.clock = c->step;
    m.payloads.push_back(Buffer::CopyOf((*json)->data(), (*json)->size()));
    if (role != Role::kData) {
      m.payloads.push_back(
          Buffer::CopyOf((*tensors)->data(), (*tensors)->size()));
    }
    return m;
  }

  // Writes the checkpoint of a round; `train_s` is the training time so far.
  Status Write(Coordinator& coordinator, std::map<NodeId, Message>& arrivals,
               double train_s) {
    const auto t0 = Clock::now();
    for (NodeId lost : coordinator.LostIds()) {
      Role role;
      int index;
      if (o_.roles.RoleOf(lost, &role, &index).ok() && role == Role::kWorker)
        return Status::FailedPrecondition(
            "{} was lost: a checkpoint needs every worker's state",
            o_.roles.Describe(lost));
    }
    int64_t step = 0;
    nlohmann::json steps = nlohmann::json::object();
    for (auto& [id, m] : arrivals) {
      Role role;
      int index;
      RETURN_IF_ERROR(o_.roles.RoleOf(id, &role, &index));
      if (m.payloads.size() != 2) {
        return Status::DataLoss("{}: a checkpoint state has 2 parts, got {}",
                                o_.roles.Describe(id), m.payloads.size());
      }
      workers_[index] = {m.payloads[0].ToString(), m.payloads[1].ToString()};
      worker_steps_[index] = m.header.clock;
    }
    std::map<std::string, std::string> files;
    for (int w = 0; w < o_.roles.num_workers(); ++w) {
      auto it = workers_.find(w);
      if (it == workers_.end()) {
        return Status::FailedPrecondition(
            "worker {} finished before it sent a checkpoint state", w);
      }
      files[fmt::format("worker-{}.json", w)] = it->second.first;
      files[fmt::format("worker-{}.safetensors", w)] = it->second.second;
      step = std::max(step, worker_steps_[w]);
      steps[std::to_string(w)] = worker_steps_[w];
    }
    nlohmann::json versions = nlohmann::json::array();
    for (int j = 0; j < o_.roles.num_servers(); ++j) {
      Message m;
      m.header.type = kCheckpointRequest;
      auto reply = coordinator.Request(o_.roles.ServerId(j), std::move(m))
                       ->Wait(o_.request_timeout);
      if (!reply.ok())
        return reply.status().WithContext(fmt::format("server {} state", j));
      if (reply->payloads.size() != 2) {
        return Status::DataLoss(
            "server {}: a checkpoint state has 2 parts, "
            "got {}",
            j, reply->payloads.size());
      }
      files[fmt::format("server-{}.json", j)] = reply->payloads[0].ToString();
      files[fmt::format("server-{}.safetensors", j)] =
          reply->payloads[1].ToString();
      versions.push_back(reply->header.clock);
    }
    for (int k = 0; k < o_.roles.num_data_servers(); ++k) {
      Message m;
      m.header.type = kCheckpointRequest;
      auto reply = coordinator.Request(o_.roles.DataServerId(k), std::move(m))
                       ->Wait(o_.request_timeout);
      if (!reply.ok()) {
        return reply.status().WithContext(
            fmt::format("data server {} state", k));
      }
      if (reply->payloads.empty())
        return Status::DataLoss("data server {}: an empty state", k);
      files[fmt::format("data-{}.json", k)] = reply->payloads[0].ToString();
    }
    files["coordinator.json"] = nlohmann::json{{"kind", "cluster"},
                                               {"mode", RunModeName(o_.mode)},
                                               {"step", step},
                                               {"worker_steps", steps},
                                               {"server_versions", versions},
                                               {"train_s", train_s}}
                                    .dump(2) +
                                "\n";
    files["config.toml"] = config_.ToToml();
    ASSIGN_OR_RETURN(
        std::string dir,
        WriteCheckpoint(run_dir_.path(), step, files, o_.checkpoint_keep));
    size_t bytes = 0;
    for (const auto& [name, b] : files) bytes += b.size();
    LogInfo(
        "checkpoint at step {}: {} ({:.1f} MB, {:.0f} ms)", step, dir,
        bytes / 1e6,
        std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    ++written_;
    return Status::Ok();
  }
  int64_t written() const { return written_.load(); }

 private:
  const Config& config_;
  const ClusterRunOptions& o_;
  const RunDirectory& run_dir_;
  std::shared_ptr<const Checkpoint> resume_;
  nlohmann::json meta_;
  // The newest state of every worker (a finished one keeps its last).
  std::map<int, std::pair<std::string, std::string>> workers_;
  std::map<int, int64_t> worker_steps_;
  std::atomic<int64_t> written_{0};
};

}  // namespace

// Waits until the coordinator ends the run; or, when fault injection
// (cluster.fail_node) picks this node, vanishes like a crashed process
// (silent: no leave, no more heartbeats) once its time came.
Status ServeUntilTheEnd(Node& node, const ClusterRunOptions& o, Role role,
                        int index) {
  const auto due = Clock::now() + o.fail_after;
  const bool vanish = o.Vanishes(role, index);
  while (!node.member().WaitForShutdown(milliseconds(50))) {
    if (vanish && Clock::now() >= due) {
      LogWarning("{} vanishes (cluster.fail_node)",
                 o.roles.Describe(node.rpc().node_id()));
      node.Leave();
      return Status::Cancelled("{} crashed (cluster.fail_node)",
                               o.roles.Describe(node.rpc().node_id()));
    }
  }
  return Status::Ok();
}

Result<Message> RequestCheckpointState(RpcEndpoint& rpc,
                                       const ClusterRunOptions& o,
                                       const std::string& who) {
  Message m;
  m.header.type = kRestoreRequest;
  auto reply = rpc.Request(o.roles.CoordinatorId(), std::move(m))
                   ->Wait(o.request_timeout);
  if (!reply.ok())
    return reply.status().WithContext(who +
                                      ": asking for its checkpoint state");
  return std::move(reply).value();
}

Result<ClusterPlan> ClusterPlan::Make(const Config& config,
                                      const DatasetSplits& data,
                                      bool resolve_shards) {
  ClusterPlan plan;
  ASSIGN_OR_RETURN(plan.options, ClusterRunOptions::FromConfig(config));
  const int n = plan.options.roles.num_workers();
  if (data.train.size() < n) {
    return Status::InvalidArgument(
        "{} training examples cannot feed {} workers", data.train.size(), n);
  }
  RETURN_IF_ERROR(plan.SizeFor(config, InputSpecOf(data.train)));
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
  plan.SetIterations(data.train.size());
  return plan;
}

int ThreadsPerWorker(const Config& config, int num_workers) {
  const int64_t threads = config.GetInt("cluster.threads_per_worker");
  if (threads > 0) return static_cast<int>(threads);
  return std::max(
      1, static_cast<int>(std::thread::hardware_concurrency()) / num_workers);
}

Status ClusterPlan::SizeFor(const Config& config, const InputSpec& input) {
  // The probe's LibTorch operators may start an OpenMP team on the thread
  // that builds it: built on a thread of its own (common/own_thread.h), not on
  // the caller's (the main thread, in process), where the team would stay all
  // run long, idle, beside every worker's (docs/gpu.md, "The second H200
  // session").
  ASSIGN_OR_RETURN(Model probe, CreateModelOnThreadOfItsOwn(
                                    ModelOptions::FromConfig(config), input));
  num_params = probe.flat.size();
  tensor_ends.clear();
  for (const auto& slot : probe.flat.slots())
    tensor_ends.push_back(slot.offset + slot.numel);
  // Workers that will compute a large layer in row slices (cluster.
  // slice_kb, nodes.cc) need ranges cut inside it: into the fewest slices
  // of at most about slice_kb, equal, of a multiple of 16 rows each. (A
  // matrix product over a row count that is not a multiple of 16 ran up to
  // 25 % slower here: the BLAS kernels' tiles are 16 wide; and each slice
  // costs its products a fixed overhead, about 40 us a step.)
  constexpr int64_t kSliceRows = 16;
  // Only settings every node shares decide it (not train.device, which a
  // node may set for itself): a GPU worker computes the layer whole, on
  // ranges cut the same way.
  if (probe.net->awaits_layers()) {
    for (const torch::Tensor& w : probe.net->sliceable_weights()) {
      if (!options.SlicesWeight(w.numel())) continue;
      const int64_t at = w.data_ptr<float>() - probe.flat.param_data();
      const int64_t rows = w.size(0);
      const int64_t slices =
          (w.numel() + options.slice_floats - 1) / options.slice_floats;
      const int64_t each = ((rows + slices - 1) / slices + kSliceRows - 1) /
                           kSliceRows * kSliceRows;
      for (int64_t r = each; r < rows; r += each)
        tensor_ends.push_back(at + r * w.size(1));
    }
  }
  std::sort(tensor_ends.begin(), tensor_ends.end());
  tensor_ends.erase(std::unique(tensor_ends.begin(), tensor_ends.end()),
                    tensor_ends.end());
  if (tensor_ends.empty() || tensor_ends.back() != num_params)
    tensor_ends.push_back(num_params);
  // Decentralized modes have no servers: one range, which nobody serves.
  ASSIGN_OR_RETURN(
      layout,
      KeyLayout::Aligned(num_params, std::max(1, options.roles.num_servers()),
                         options.pipeline_floats, tensor_ends));
  return Status::Ok();
}

void ClusterPlan::SetIterations(int64_t train_size) {
  ClusterRunOptions& o = options;
  if (o.iterations > 0) return;
  // Every worker runs the same count (sync steps always find n gradients),
  // and every node derives it without the shards: an epoch is N / n
  // examples per worker, whatever the sharding method, so methods are
  // compared on the same number of samples. (A shard with broadcast
  // examples is larger than N / n; docs/sharding.md.)
  const int64_t shard = train_size / options.roles.num_workers();
  o.iterations = o.epochs * ((shard + o.worker_batch - 1) / o.worker_batch);
}

Result<ClusterPlan> ClusterPlan::FromDataFacts(const Config& config,
                                               const DataFacts& facts) {
  ClusterPlan plan;
  ASSIGN_OR_RETURN(plan.options, ClusterRunOptions::FromConfig(config));
  RETURN_IF_ERROR(plan.SizeFor(config, InputSpec{facts.channels, facts.height,
                                                 facts.width, facts.classes}));
  plan.SetIterations(facts.train_size);
  return plan;
}

Status CheckMetricsAddress(const ClusterRunOptions& o) {
  if (o.metrics_address.empty()) return Status::Ok();
  auto probe = HttpServer::Start(
      o.metrics_address, [](const HttpRequest&) { return HttpResponse{}; });
  if (!probe.ok()) return probe.status().WithContext("cluster.metrics_address");
  return Status::Ok();
}

Result<std::shared_ptr<const Checkpoint>> CheckResumable(
    const Config& config, const ClusterRunOptions& o,
    const RunDirectory& run_dir) {
  if (!o.resume) return std::shared_ptr<const Checkpoint>();
  ClusterCheckpoints checked(config, o, run_dir);
  RETURN_IF_ERROR(checked.Load(/*announce=*/false));
  return checked.loaded();
}

Result<nlohmann::json> RunCoordinatorRole(
    const Config& config, const ClusterRunOptions& o,
    std::unique_ptr<Transport> transport, const RunDirectory& run_dir,
    const std::atomic<bool>* stop,
    std::shared_ptr<const Checkpoint> resume_from) {
  const auto start = Clock::now();
  CoordinatorOptions co;
  co.roles = o.roles;
  co.heartbeat_timeout = o.heartbeat_timeout;
  co.heartbeat_interval = o.heartbeat_interval;
  co.join_timeout = o.request_timeout;
  co.staleness = o.staleness;
  co.worker_loss_fatal = WorkerLossFatal(o.mode);
  // Checkpoints (docs/checkpoints.md).
  ClusterCheckpoints checkpoints(config, o, run_dir);
  if (o.resume)
    RETURN_IF_ERROR(
        checkpoints.Load(/*announce=*/true, std::move(resume_from)));
  Coordinator* coordinator_ptr = nullptr;  // set once it exists
  std::atomic<int64_t> last_checkpoint_ns{0};
  if (o.restart && !Lockstep(o.mode)) {
    // A lost server is replaced in place (free modes); lockstep modes start
    // the whole cluster again (launch.cc).
    co.server_restart_timeout = o.restart_timeout;
    co.worker_restart = true;
  }
  if (o.checkpoints()) {
    // Sync k-of-n workers are not at one step: they meet as free ones do,
    // each leaving the servers while it waits (Exchange::PauseForRound).
    co.checkpoint_lockstep = Lockstep(o.mode) && !o.leader_first;
    co.checkpoint_resumed_step = checkpoints.step();
    co.on_restore = [&checkpoints](NodeId id) {
      return checkpoints.Restore(id);
    };
    co.on_checkpoint = [&](std::map<NodeId, Message>& arrivals) {
      const auto ts = coordinator_ptr->TrainingStart();
      const double train_s =
          checkpoints.prior_train_s() +
          (ts == Clock::time_point{}
               ? 0.0
               : std::chrono::duration<double>(Clock::now() - ts).count());
      Status st = checkpoints.Write(*coordinator_ptr, arrivals, train_s);
      last_checkpoint_ns = Clock::now().time_since_epoch().count();
      return st;
    };
  }
  // Prometheus /metrics (cluster.metrics_address): the nodes' heartbeat
  // statuses, the run's phase and its lost nodes.
  std::shared_ptr<ClusterMetrics> metrics;
  std::unique_ptr<HttpServer> http;
  if (!o.metrics_address.empty()) {
    metrics = std::make_shared<ClusterMetrics>(
        o.roles, std::vector<std::pair<std::string, std::string>>{
                     {"mode", RunModeName(o.mode)},
                     {"model", config.GetString("model.name")},
                     {"dataset", config.GetString("data.dataset")},
                     {"run", run_dir.path().substr(
                                 run_dir.path().find_last_of('/') + 1)}});
    co.on_status = [metrics](NodeId id, const std::string& text) {
      metrics->Update(id, text);
    };
    auto started =
        HttpServer::Start(o.metrics_address, [metrics](const HttpRequest& r) {
          HttpResponse res;
          if (r.path == "/metrics") {
            res.content_type = "text/plain; version=0.0.4; charset=utf-8";
            res.body = metrics->Render();
          } else if (r.path == "/") {
            res.content_type = "text/html; charset=utf-8";
            res.body =
                "<html><body><p>strata coordinator: <a "
                "href=\"/metrics\">/metrics</a></p></body></html>\n";
          } else {
            res.status = 404;
            res.body = "not found: " + r.path + " (try /metrics)\n";
          }
          return res;
        });
    if (!started.ok())
      return started.status().WithContext("cluster.metrics_address");
    http = std::move(started).value();
    LogInfo("coordinator: Prometheus metrics at {}/metrics", http->url());
  }
  Coordinator coordinator(co, std::move(transport));
  coordinator_ptr = &coordinator;
  coordinator.Start();
  auto set_phase = [&](RunPhase phase) {
    if (!metrics) return;
    metrics->SetPhase(phase);
    metrics->SetLost(coordinator.LostNodes());
  };

  Status run_status;
  bool interrupted = false;
  // A Ctrl-C with checkpoints on: one last round, after which the workers
  // stop; when it fails or takes longer than a request may, plain stops.
  Clock::time_point stop_round_asked{};
  int64_t stop_round_after = 0;
  while (true) {
    run_status = coordinator.WaitForWorkers(milliseconds(200));
    if (run_status.code() != Status::Code::kDeadlineExceeded) break;
    const bool training = coordinator.TrainingStart() != Clock::time_point{};
    set_phase(training ? RunPhase::kTraining : RunPhase::kJoining);
    if (training && o.fail_role == Role::kCoordinator &&
        Clock::now() - coordinator.TrainingStart() >= o.fail_after) {
      // Fault injection: the coordinator goes silent, as a crash would;
      // every node must notice and stop itself.
      LogWarning("coordinator vanishes (cluster.fail_node)");
      coordinator.Stop();
      return Status::Cancelled("the coordinator crashed (cluster.fail_node)");
    }
    if (o.checkpoint_every_s > 0 && training && !interrupted) {
      const int64_t last = last_checkpoint_ns.load();
      const auto since =
          last == 0 ? Clock::now() - coordinator.TrainingStart()
                    : Clock::now() - Clock::time_point(Clock::duration(last));
      if (std::chrono::duration<double>(since).count() >=
          o.checkpoint_every_s) {
        coordinator.RequestCheckpoint(/*stop_after=*/false);
        last_checkpoint_ns = Clock::now().time_since_epoch().count();
      }
    }
    if (stop != nullptr && stop->load()) {
      if (!interrupted) {
        interrupted = true;
        LogWarning(
            "interrupted: {}stopping the workers, then evaluating and writing "
            "the summary",
            o.checkpoints() ? "writing a checkpoint, " : "");
        if (o.checkpoints() && training) {
          stop_round_asked = Clock::now();
          stop_round_after = coordinator.checkpoint_rounds();
          coordinator.RequestCheckpoint(/*stop_after=*/true);
        }
      }
      const bool round_pending =
          stop_round_asked != Clock::time_point{} &&
          Clock::now() - stop_round_asked < o.request_timeout &&
          (coordinator.checkpoint_rounds() <= stop_round_after ||
           coordinator.last_checkpoint_ok());
      // Repeated every round: a stop sent while a worker was still starting
      // (not yet connected) would be lost, and it would train to the end.
      if (!round_pending) coordinator.StopWorkers();
    }
  }
  // The workers may have seen the stop themselves and finished before the
  // loop above looked at it: the run was interrupted all the same.
  if (stop != nullptr && stop->load()) interrupted = true;
  // Training time runs from barrier 0 (every worker set up: data loaded,
  // model initialised, collectives connected) to the last worker's end, as
  // the single-process trainer counts its steps only; the set-up before it
  // is setup_s.
  const auto end = Clock::now();
  const auto training_start = coordinator.TrainingStart();
  const bool started = training_start != Clock::time_point{};
  const double train_s =
      std::chrono::duration<double>(end - (started ? training_start : start))
          .count();
  const double setup_s =
      started ? std::chrono::duration<double>(training_start - start).count()
              : 0.0;
  const std::vector<NodeId> lost_ids = coordinator.LostIds();
  auto is_lost = [&](NodeId id) {
    return std::find(lost_ids.begin(), lost_ids.end(), id) != lost_ids.end();
  };
  if (!run_status.ok()) {
    // Release the workers blocked on the failed step at once.
    for (int w = 0; w < o.roles.num_workers(); ++w) {
      Message m;
      m.header.type = MessageType::kShutdown;
      m.header.flags |= kShutdownError;
      m.payloads.push_back(Buffer::CopyOf(run_status.message().data(),
                                          run_status.message().size()));
      // One-way in effect: the worker may be the lost one.
      coordinator.Request(o.roles.WorkerId(w), std::move(m));
    }
  }

  set_phase(RunPhase::kFinishing);
  // Gather: servers' statistics, workers' reports, the final evaluation.
  // Statistics of every live node of `role` (servers, data servers).
  auto gather_stats = [&](Role role) {
    nlohmann::json out = nlohmann::json::array();
    for (NodeId id : o.roles.Ids(role)) {
      if (is_lost(id)) continue;
      Message m;
      m.header.type = kStatsRequest;
      auto reply =
          coordinator.Request(id, std::move(m))->Wait(milliseconds(10000));
      if (reply.ok())
        out.push_back(ParseOr(Text(*reply), nlohmann::json::object()));
      else
        LogWarning("no statistics from {}: {}", o.roles.Describe(id),
                   reply.status().message());
    }
    return out;
  };
  nlohmann::json servers = gather_stats(Role::kServer);
  nlohmann::json data_servers = gather_stats(Role::kData);
  nlohmann::json final_eval = nlohmann::json::object();
  if (run_status.ok() && o.roles.has_evaluator() &&
      !is_lost(o.roles.EvaluatorId())) {
    Message m;
    m.header.type = kFinalEvalRequest;
    auto reply = coordinator.Request(o.roles.EvaluatorId(), std::move(m))
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
  for (int w = 0; w < o.roles.num_workers(); ++w) {
    auto it = reports.find(o.roles.WorkerId(w));
    nlohmann::json r =
        it == reports.end()
            ? nlohmann::json{{"worker", w}, {"error", "no report (lost)"}}
            : ParseOr(it->second, nlohmann::json::object());
    samples += r.value("samples", int64_t{0});
    steps = std::max(steps, r.value("iterations", int64_t{0}));
    workers.push_back(r);
  }
  // The run's gradient counters: server 0's, or in sync k-of-n the
  // leader's (a follower counts no dropped or deferred gradients).
  nlohmann::json s0 = servers.empty() ? nlohmann::json::object() : servers[0];
  for (const nlohmann::json& s : servers) {
    if (s.is_object() && !s.value("follower", false)) {
      s0 = s;
      break;
    }
  }
  nlohmann::json summary = final_eval;
  summary["wall_s"] =
      std::chrono::duration<double>(Clock::now() - start).count();
  // A resumed run counts the training before its checkpoint too.
  const double total_train_s = checkpoints.prior_train_s() + train_s;
  summary["train_s"] = total_train_s;
  summary["setup_s"] = setup_s;
  summary["samples"] = samples;
  summary["steps"] = steps;
  summary["samples_per_s"] = total_train_s > 0 ? samples / total_train_s : 0.0;
  summary["interrupted"] = interrupted;
  summary["model"] = config.GetString("model.name");
  summary["dataset"] = config.GetString("data.dataset");
  summary["mode"] = RunModeName(o.mode);
  summary["servers"] = o.roles.num_servers();
  summary["workers_count"] = o.roles.num_workers();
  summary["worker_batch"] = o.worker_batch;
  summary["iterations_per_worker"] = o.iterations;
  summary["workers"] = workers;
  // Bytes each worker sent and received (to servers or peers), on average.
  double bytes = 0;
  for (const auto& w : workers) {
    bytes += w.value("bytes_pushed", 0.0) + w.value("bytes_pulled", 0.0);
  }
  summary["bytes_per_worker"] = workers.empty() ? 0.0 : bytes / workers.size();
  // What the bytes are: cluster.compression, and whether pulls are too.
  summary["compression"] = CompressionName(o.compression);
  summary["compress_pulls"] = o.compress_pulls;
  // Layer-wise pipelining: the most a range holds (0: off or not used). A
  // server may still keep its share as one range (KeyLayout::Aligned);
  // servers_stats says how many it has.
  summary["pipeline_kb"] =
      static_cast<double>(o.pipeline_floats) * sizeof(float) / 1024.0;
  summary["servers_stats"] = servers;
  // Every gradient reaches every server; s0's counts are the run's.
  summary["staleness_histogram"] =
      s0.value("staleness", nlohmann::json::object());
  summary["dropped_gradients"] = s0.value("dropped", int64_t{0});
  summary["deferred_gradients"] = s0.value("deferred", int64_t{0});
  summary["updates"] = s0.value("updates", int64_t{0});
  summary["gradients_per_update"] =
      s0.value("gradients_per_update", nlohmann::json::object());
  summary["tail_updates"] = s0.value("tail_updates", int64_t{0});
  summary["lost_workers"] = coordinator.LostNodes();
  if (o.data_servers > 0) {
    // The data service: each data server's throughput, and the share of
    // the workers' training time they spent waiting for a batch.
    double wait = 0, busy = 0;
    for (const auto& w : workers) {
      wait += w.value("data_wait_s", 0.0);
      busy += w.value("compute_s", 0.0) + w.value("comm_s", 0.0) +
              w.value("data_wait_s", 0.0);
    }
    summary["data_service"] = {
        {"data_servers", data_servers},
        {"assignment", AssignmentName(o.assignment)},
        {"prefetch", o.prefetch},
        {"data_wait_fraction", busy > 0 ? wait / busy : 0.0}};
  }
  if (o.mode == RunMode::kGossip) {
    // GoSGD keeps the weights' sum at 1 (less what lost workers held).
    double total = 0;
    for (const auto& w : workers) total += w.value("gossip_weight", 0.0);
    summary["gossip_weight_total"] = total;
  }
  if (checkpoints.resuming()) {
    summary["resumed_from"] = checkpoints.dir();
    summary["resumed_at_step"] = checkpoints.step();
  }
  if (o.checkpoints()) summary["checkpoints_written"] = checkpoints.written();
  {
    // Servers replaced while the run went on (cluster.restart), and the
    // updates of their ranges that the restart lost (at least).
    nlohmann::json restarted = nlohmann::json::array();
    for (const NodeRestart& r : coordinator.Restarts())
      restarted.push_back({{"node", r.node}, {"down_s", r.down_s}});
    if (!restarted.empty()) {
      int64_t lost = 0;
      for (const auto& st : servers)
        lost += st.value("lost_updates_at_least", int64_t{0});
      summary["node_restarts"] = restarted;
      summary["lost_updates_at_least"] = lost;
    }
  }
  if (!run_status.ok()) summary["error"] = run_status.message();
  set_phase(run_status.ok() ? RunPhase::kDone : RunPhase::kFailed);
  Status written = run_dir.WriteJson("summary.json", summary);
  coordinator.Stop();
  if (!run_status.ok()) return run_status;
  RETURN_IF_ERROR(written);
  return summary;
}

nlohmann::json RunFactsJson(const ClusterPlan& plan) {
  return nlohmann::json{{"num_params", plan.num_params},
                        {"tensor_ends", plan.tensor_ends},
                        {"iterations", plan.options.iterations}};
}

Status CheckPlanAgainstRunFacts(const std::string& who, const ClusterPlan& plan,
                                const nlohmann::json& facts) {
  const int64_t theirs = facts.value("num_params", int64_t{-1});
  if (theirs != plan.num_params) {
    return Status::FailedPrecondition(
        "{}: the model has {} parameters here but {} on the data servers "
        "(the same config everywhere?)",
        who, plan.num_params, theirs);
  }
  // The servers cut their ranges at the data servers' tensor ends (and row
  // cuts); a worker cutting elsewhere (another cluster.slice_kb) would push
  // ranges no server has. (cluster.pipeline_kb, which groups them into
  // ranges, each node reads from its own config.) Facts without tensor ends
  // come from a data server that predates them.
  const nlohmann::json ends = facts.value("tensor_ends", nlohmann::json());
  if (ends.is_array() && ends != nlohmann::json(plan.tensor_ends)) {
    return Status::FailedPrecondition(
        "{}: the model's key ranges are cut at {} here but at {} on the data "
        "servers (the same cluster.slice_kb everywhere?)",
        who, nlohmann::json(plan.tensor_ends).dump(), ends.dump());
  }
  return Status::Ok();
}

std::string RunFacts(const ClusterPlan& plan) {
  return RunFactsJson(plan).dump();
}

Status RunServerRole(const Config& config, const ClusterRunOptions& o,
                     int index, std::unique_ptr<Transport> transport,
                     const std::string& coordinator_endpoint,
                     const std::atomic<bool>* stop) {
  // The key range and the schedule's length come from the coordinator's
  // cluster map (what the workers announced): a server needs neither the
  // model nor the dataset.
  ServerOptions so;
  so.optimizer = OptimizerOptions::FromConfig(config);
  so.policy.mode = o.mode == RunMode::kSync ? UpdatePolicy::Mode::kSync
                                            : UpdatePolicy::Mode::kAsync;
  so.policy.rule = o.mode == RunMode::kEasgd
                       ? UpdatePolicy::Rule::kElastic
                       : UpdatePolicy::Rule::kGradientStep;
  so.policy.sum_gradients = o.sum_gradients;
  so.policy.num_workers = o.roles.num_workers();
  so.policy.updates_per_step = o.updates_per_step;
  so.policy.defer_late = o.defer_late;
  so.policy.inverse_staleness = o.inverse_staleness;
  so.policy.rate_scale = o.server_rate_scale;

  Node node(std::move(transport), o.roles, o.heartbeat_interval,
            o.heartbeat_timeout);
  ServerGroup server(so, node.rpc());
  for (MessageType type : {MessageType::kPush, MessageType::kPullRequest,
                           kStatsRequest, kCheckpointRequest}) {
    node.On(type, [&server](Message m) { server.Handle(std::move(m)); });
  }
  // Pushes and pulls only: their handling never waits (statistics and
  // checkpoint requests may go through the server's locks at length).
  if (o.inline_server) {
    node.rpc().SetInlineHandling([](const MessageHeader& h) {
      return h.type == MessageType::kPush ||
             h.type == MessageType::kPullRequest;
    });
  }
  // /metrics: the server's counters ride on its heartbeats.
  if (!o.metrics_address.empty())
    node.SetStatusSource([&server] { return server.StatsJson(); });
  auto configure = [&](const std::string& text) -> Status {
    nlohmann::json facts = nlohmann::json::parse(text, nullptr, false);
    if (facts.is_discarded() ||
        !facts.value("num_params", nlohmann::json()).is_number_integer() ||
        !facts.value("iterations", nlohmann::json()).is_number_integer()) {
      return Status::DataLoss(
          "server {}: bad run facts from the coordinator: {}", index, text);
    }
    const int64_t num_params = facts["num_params"].get<int64_t>();
    const int64_t iterations = facts["iterations"].get<int64_t>();
    // The ranges are cut where the workers' model's tensors end.
    std::vector<int64_t> tensor_ends;
    const nlohmann::json ends = facts.value("tensor_ends", nlohmann::json());
    if (ends.is_array()) {
      for (const nlohmann::json& e : ends) {
        if (!e.is_number_integer()) {
          return Status::DataLoss(
              "server {}: bad tensor ends in the run facts: {}", index,
              ends.dump());
        }
        tensor_ends.push_back(e.get<int64_t>());
      }
    }
    Result<KeyLayout> cut = KeyLayout::Aligned(
        num_params, o.roles.num_servers(), o.pipeline_floats, tensor_ends);
    if (!cut.ok()) {
      return cut.status().WithContext(
          fmt::format("server {}: the key layout", index));
    }
    const KeyLayout& layout = *cut;
    // Sync k-of-n: the lead range chooses each step's gradients, the
    // others (on this node or another) follow.
    const int lead = LeadRange(o, layout);
    server.Configure(layout.RangesOf(index),
                     LrSchedule::FromConfig(config, iterations),
                     lead < 0 ? -1 : layout.range(lead).begin);
    if (o.checkpoints()) {
      // Resuming: the range comes from the checkpoint (before any push).
      ASSIGN_OR_RETURN(Message state,
                       RequestCheckpointState(node.rpc(), o,
                                              fmt::format("server {}", index)));
      if (!state.payloads.empty()) {
        RETURN_IF_ERROR(server.RestoreState(state.payloads));
        LogInfo("server {}: resumed at step {}", index, state.header.clock);
      } else if (o.resume) {
        return Status::FailedPrecondition(
            "server {}: the coordinator has no checkpoint state for it (a "
            "replacement needs a checkpoint written before the loss)",
            index);
      }
    }
    LogDebug("server {}: keys {} of {} parameters", index, layout.ToString(),
             num_params);
    return Status::Ok();
  };
  Status joined =
      node.Join(coordinator_endpoint, o.request_timeout, "", configure);
  if (joined.ok()) {
    RETURN_IF_ERROR(ServeUntilTheEnd(node, o, Role::kServer, index));
  }
  // Servers serve until the coordinator ends the run; `stop` is for roles
  // that loop on their own.
  static_cast<void>(stop);
  // The endpoint stops delivering before the server goes away.
  node.Leave();
  if (!joined.ok()) return joined;
  if (!node.member().shutdown_reason().empty())
    return Status::Unavailable("{}", node.member().shutdown_reason());
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
  // With the data service the worker loads nothing: the shape, the model
  // size and the budget come from the data servers' run facts.
  const bool service = o.data_servers > 0;
  if (!service && !plan.shards) {
    return Status::FailedPrecondition(
        "worker {}: the cluster plan was made without shards", index);
  }
  if (!service && index == 0 && run_dir != nullptr) {
    // The shard report goes into the run directory (docs/sharding.md).
    RETURN_IF_ERROR(WriteShardReport(plan.shards->report,
                                     run_dir->path() + "/shard_report.json"));
  }
  Mailbox mailbox;
  PublishedModel published;
  Node node(std::move(transport), o.roles, o.heartbeat_interval,
            o.heartbeat_timeout);
  // cluster.restart: requests to a server that is replaced are sent again.
  if (o.restart) node.rpc().KeepRequestsForResend(true);
  for (MessageType type : {kPeerModel, kGossipModel, kGossipDone, kTreeModel}) {
    node.On(type, [&mailbox](Message m) { mailbox.Put(std::move(m)); });
  }
  node.On(kModelRequest, [&published, &node](Message m) {
    // The evaluator of a decentralized run asks for this worker's model.
    Message reply;
    reply.header.type = MessageType::kAck;
    {
      std::lock_guard<std::mutex> lock(published.mu);
      reply.header.clock = published.step;
      if (published.live != nullptr) {
        reply.payloads.push_back(
            Buffer::CopyOf(published.live, sizeof(float) * published.size));
      } else if (published.frozen) {
        reply.payloads.push_back(
            Buffer::CopyOf(published.final_copy.data(),
                           sizeof(float) * published.final_copy.size()));
      }
    }
    if (reply.payloads.empty()) {
      node.rpc().ReplyErrorOrLog(
          m, Status::Unavailable("the worker has no model yet"));
      return;
    }
    node.rpc().ReplyOrLog(m, std::move(reply));
  });
  node.On(MessageType::kShutdown, [&mailbox, &node](Message) {
    if (!node.member().shutdown_reason().empty())
      mailbox.Close(node.member().shutdown_reason());
  });
  WorkerCheckpoints checkpoints;
  checkpoints.every_updates = o.checkpoint_every_updates;
  node.On(kCheckpointPause, [&checkpoints](Message m) {
    int64_t seen = checkpoints.pause_round.load();
    while (
        m.header.clock > seen &&
        !checkpoints.pause_round.compare_exchange_weak(seen, m.header.clock)) {
    }
  });
  if (!o.metrics_address.empty()) {
    // /metrics: the worker's counters after its last step ride on its
    // heartbeats.
    node.SetStatusSource([&published] {
      std::lock_guard<std::mutex> lock(published.mu);
      return published.metrics.ToJson().dump();
    });
  }
  std::string facts_text;
  auto keep_facts = [&facts_text](const std::string& text) {
    facts_text = text;
    return Status::Ok();
  };
  RETURN_IF_ERROR(node.Join(
      coordinator_endpoint, o.request_timeout, service ? "" : RunFacts(plan),
      service ? std::function<Status(const std::string&)>(keep_facts)
              : nullptr));
  if (o.checkpoints()) {
    ASSIGN_OR_RETURN(
        checkpoints.restore,
        RequestCheckpointState(node.rpc(), o, fmt::format("worker {}", index)));
    if (o.resume && checkpoints.restore.payloads.empty()) {
      // A replacement starting from nothing would start the model over.
      return Status::FailedPrecondition(
          "worker {}: the coordinator has no checkpoint state for it (a "
          "replacement needs a checkpoint written before the loss)",
          index);
    }
  }
  ClusterPlan served_plan;
  const ClusterPlan* p = &plan;
  Dataset shape;  // the data's shape only (data service)
  std::unique_ptr<BatchStream> stream;
  const ShardSet no_shards;
  if (service) {
    nlohmann::json facts = ParseOr(facts_text, nlohmann::json::object());
    ASSIGN_OR_RETURN(DataFacts df, DataFacts::FromJson(
                                       facts.value("data", nlohmann::json())));
    ASSIGN_OR_RETURN(served_plan, ClusterPlan::FromDataFacts(config, df));
    RETURN_IF_ERROR(CheckPlanAgainstRunFacts(fmt::format("worker {}", index),
                                             served_plan, facts));
    p = &served_plan;
    shape.channels = df.channels;
    shape.height = df.height;
    shape.width = df.width;
    shape.num_classes = df.classes;
    const NodeId ds = o.roles.DataServerId(index % o.data_servers);
    ClusterMember* member = &node.member();
    stream = std::make_unique<BatchStream>(
        node.rpc(), ds, o.roles.Describe(ds), o.prefetch, o.request_timeout,
        [member]() -> std::string {
          if (!member->shutdown_requested()) return "";
          const std::string why = member->shutdown_reason();
          return why.empty() ? "the run ended" : why;
        });
  }
  ExchangeEnv env;
  env.rpc = &node.rpc();
  env.member = &node.member();
  env.layout = &p->layout;
  env.mailbox = &mailbox;
  env.optimizer = OptimizerOptions::FromConfig(config);
  env.schedule = LrSchedule::FromConfig(config, p->options.iterations);
  auto metrics =
      RunWorker(config, p->options, index, service ? shape : data.train,
                service ? no_shards : *plan.shards, env, &published, run_dir,
                stop, stream.get(), o.checkpoints() ? &checkpoints : nullptr);
  if (!metrics.ok()) {
    // Go silent, like a crashed process: the coordinator's heartbeat
    // monitor decides what the loss means for the run.
    LogError("worker {}: {}", index, metrics.status().message());
    node.Leave();
    return metrics.status();
  }
  Status done = node.member().ReportDone(metrics->ToJson().dump());
  if (done.ok() && IsDecentralized(o.mode)) {
    // The evaluator averages the workers' final models: stay until the end.
    node.WaitForEnd();
  }
  node.Leave();
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
  std::atomic<bool> done{false};
  std::mutex final_mu;
  std::unique_ptr<Message> final_request;  // GUARDED_BY(final_mu)
  Node node(std::move(transport), o.roles, o.heartbeat_interval,
            o.heartbeat_timeout);
  if (o.restart) node.rpc().KeepRequestsForResend(true);
  node.On(kFinalEvalRequest, [&](Message m) {
    std::lock_guard<std::mutex> lock(final_mu);
    final_request = std::make_unique<Message>(std::move(m));
    done = true;
  });
  node.On(MessageType::kShutdown, [&done](Message) { done = true; });
  RETURN_IF_ERROR(
      node.Join(coordinator_endpoint, o.request_timeout, RunFacts(plan)));
  ClusterMember& member = node.member();
  RpcEndpoint& rpc = node.rpc();
  const bool decentralized = IsDecentralized(o.mode);
  std::unique_ptr<PsClient> ps;
  if (!decentralized) {
    ps = std::make_unique<PsClient>(rpc, plan.layout,
                                    o.roles.Ids(Role::kServer));
  }
  // A node that stops itself (it lost the coordinator) gets no kShutdown:
  // end the evaluation loop then too, or it would wait on servers that are
  // gone.
  std::atomic<bool> vanished{false};
  std::thread watch([&] {
    const auto due = Clock::now() + o.fail_after;
    while (!done.load() && !member.WaitForShutdown(milliseconds(100))) {
      if (o.Vanishes(Role::kEvaluator, 0) && Clock::now() >= due) {
        LogWarning("evaluator vanishes (cluster.fail_node)");
        vanished = true;
        break;
      }
    }
    done = true;
  });
  Status status;
  if (config.GetBool("cluster.evaluator")) {
    status = decentralized
                 ? RunPeerEvaluator(config, o, data, rpc, member, run_dir,
                                    &done, start)
                 : RunEvaluator(config, o, data, *ps, run_dir, &done, start);
  }
  if (vanished.load()) {
    watch.join();
    node.Leave();
    return Status::Cancelled("the evaluator crashed (cluster.fail_node)");
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
    int64_t final_version = 0;
    nlohmann::json consensus;
    if (decentralized) {
      // The average of the workers' final models (each waits for the end).
      auto gathered = GatherWorkerModels(rpc, o, model->flat.param_data(),
                                         model->flat.size());
      if (!gathered.ok()) {
        status = gathered.status().WithContext("final model");
        rpc.ReplyErrorOrLog(*request, status);
        break;
      }
      final_version = gathered->min_step;
      consensus = gathered->consensus_distance;
    } else {
      auto pulled =
          ps->Pull(model->flat.param_data(), {})->Wait(o.request_timeout);
      if (!pulled.ok()) {
        status = pulled.status().WithContext("final pull");
        rpc.ReplyErrorOrLog(*request, status);
        break;
      }
      final_version = pulled->versions[0];
    }
    // The final evaluation stays on this thread: training is over, so the
    // team it may start sits beside no worker's.
    auto recalibrated = RecalibrateBatchNorm(*model->net, data.train,
                                             o.eval_batch, kBatchNormExamples);
    if (!recalibrated.ok()) {
      status = recalibrated.status();
      rpc.ReplyErrorOrLog(*request, status);
      break;
    }
    auto tr = Evaluate(*model->net, data.train, o.eval_batch);
    auto va = Evaluate(*model->net, data.val, o.eval_batch);
    if (!tr.ok() || !va.ok()) {
      status = !tr.ok() ? tr.status() : va.status();
      rpc.ReplyErrorOrLog(*request, status);
      break;
    }
    if (final_params != nullptr) {
      final_params->assign(model->flat.param_data(),
                           model->flat.param_data() + model->flat.size());
    }
    if (run_dir != nullptr) {
      // The trained model, for use outside strata (docs/models.md).
      Status written = WriteModelFiles(run_dir->path(), config,
                                       InputSpecOf(data.train), *model);
      if (!written.ok()) LogWarning("model files: {}", written.message());
    }
    result = {
        {"final_train_loss", tr->loss},   {"final_train_acc", tr->accuracy},
        {"final_val_loss", va->loss},     {"final_val_acc", va->accuracy},
        {"final_version", final_version}, {"parameters", plan.num_params}};
    if (decentralized) result["final_consensus_distance"] = consensus;
    if (run_dir != nullptr) {
      nlohmann::json line{
          {"step", o.iterations},
          {"version", final_version},
          {"wall_s",
           std::chrono::duration<double>(Clock::now() - start).count()},
          {"val_loss", va->loss},
          {"val_acc", va->accuracy},
          {"final", true}};
      // The final point of the consensus-distance curve.
      if (decentralized) line["consensus_distance"] = consensus;
      Status appended = run_dir->AppendJson("eval.jsonl", line);
      if (!appended.ok()) LogWarning("eval.jsonl: {}", appended.message());
    }
    LogInfo(
        "final model (version {}): train loss {:.4f} acc {:.4f} | val loss "
        "{:.4f} acc {:.4f}",
        final_version, tr->loss, tr->accuracy, va->loss, va->accuracy);
    Message reply;
    reply.header.type = kFinalEvalReply;
    const std::string text = result.dump();
    reply.payloads.push_back(Buffer::CopyOf(text.data(), text.size()));
    rpc.ReplyOrLog(*request, std::move(reply));
    node.WaitForEnd();
  }
  static_cast<void>(stop);  // the evaluator ends with the run
  done = true;
  watch.join();
  node.Leave();
  if (status.ok() && !member.shutdown_reason().empty())
    return Status::Unavailable("{}", member.shutdown_reason());
  return status;
}

}  // namespace strata
