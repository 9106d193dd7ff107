#include "run/options.h"

#include <algorithm>
#include <string>

#include "metrics/http_server.h"

namespace strata {
namespace {

// The roles and the data service (cluster.*, data.assignment/prefetch).
Status ResolveRoles(const Config& c, ClusterRunOptions& o) {
  const int n = static_cast<int>(c.GetInt("cluster.workers"));
  // Decentralized modes have no servers, whatever cluster.servers says.
  const int servers =
      UsesServers(o.mode) ? static_cast<int>(c.GetInt("cluster.servers")) : 0;
  o.data_servers = static_cast<int>(c.GetInt("cluster.data_servers"));
  ASSIGN_OR_RETURN(o.assignment,
                   ParseAssignment(c.GetString("data.assignment")));
  o.prefetch = static_cast<int>(c.GetInt("data.prefetch"));
  if (o.data_servers > n) {
    return Status::InvalidArgument(
        "cluster.data_servers = {} is more than cluster.workers = {} (each "
        "data server feeds the workers w mod m)",
        o.data_servers, n);
  }
  if (o.assignment == Assignment::kDynamic && o.data_servers == 0) {
    return Status::InvalidArgument(
        "data.assignment = \"dynamic\" needs the data service: set "
        "cluster.data_servers >= 1");
  }
  if (o.assignment == Assignment::kDynamic && o.mode != RunMode::kAsync) {
    return Status::InvalidArgument(
        "data.assignment = \"dynamic\" needs cluster.mode = \"async\" (it is "
        "\"{}\"): workers then take different numbers of steps, which "
        "synchronous steps, clocks and collectives cannot",
        RunModeName(o.mode));
  }
  // The evaluator node always exists: it evaluates the final model even
  // when cluster.evaluator turns the periodic evaluations off.
  o.roles = RoleTable::Standard(servers, n, /*evaluator=*/true, o.data_servers);
  return Status::Ok();
}

// The per-worker batch (B / n with cluster.adapt_hyperparams), the budget
// and what the data and the model are.
Status ResolveTraining(const Config& c, ClusterRunOptions& o) {
  const int n = o.roles.num_workers();
  const int64_t batch = c.GetInt("train.batch_size");
  o.adapt = c.GetBool("cluster.adapt_hyperparams");
  if (o.adapt && batch < n) {
    return Status::InvalidArgument(
        "train.batch_size = {} cannot be split over cluster.workers = {} "
        "(per-worker batch B/n would be 0); raise the batch or set "
        "cluster.adapt_hyperparams = false",
        batch, n);
  }
  o.worker_batch = o.adapt ? batch / n : batch;
  o.iterations = c.GetInt("train.iterations");
  o.iterations_set = o.iterations > 0;
  o.epochs = c.GetInt("train.epochs");
  if (o.iterations == 0 && o.epochs == 0)
    return Status::InvalidArgument(
        "nothing to train: train.iterations = 0 and train.epochs = 0");
  o.shuffle = c.GetBool("data.shuffle");
  o.seed = static_cast<uint64_t>(c.GetInt("run.seed"));
  ASSIGN_OR_RETURN(o.sampler, ParseSamplerKind(c.GetString("data.sampler")));
  o.loss_aware_max_boost = c.GetFloat("data.loss_aware.max_boost");
  o.augment = c.GetBool("data.augment");
  o.served_log_ids = c.GetString("data.served_log") == "ids";
  o.model_name = c.GetString("model.name");
  o.dataset_name = c.GetString("data.dataset");
  o.model = ModelOptions::FromConfig(c);
  o.device = DeviceOptions::FromConfig(c);
  o.optimizer = OptimizerOptions::FromConfig(c);
  o.schedule = LrSchedule::FromConfig(c, 1);
  o.threads_per_worker =
      static_cast<int>(c.GetInt("cluster.threads_per_worker"));
  return Status::Ok();
}

// Logging, evaluation and profiling.
void ResolveReporting(const Config& c, ClusterRunOptions& o) {
  o.log_every = c.GetInt("train.log_every");
  o.profile_from = c.GetInt("train.profile_from");
  o.profile_steps = c.GetInt("train.profile_steps");
  o.timeline = c.GetBool("cluster.timeline");
  o.timeline_events = c.GetInt("cluster.timeline_events");
  o.eval_batch = c.GetInt("train.eval_batch_size");
  o.eval_every_updates = c.GetInt("eval.every_updates");
  o.eval_every_s = c.GetFloat("eval.every_s");
  o.periodic_eval = c.GetBool("cluster.evaluator");
}

// Fault injection (tests and studies); cluster.fail_node names a role.
Status ResolveFaults(const Config& c, ClusterRunOptions& o) {
  o.worker_delay_ms = static_cast<int>(c.GetInt("cluster.worker_delay_ms"));
  o.fail_worker = static_cast<int>(c.GetInt("cluster.fail_worker"));
  o.fail_at = c.GetInt("cluster.fail_at");
  const std::string node = c.GetString("cluster.fail_node");
  o.fail_role = Role::kWorker;  // none
  if (!node.empty()) {
    Result<Role> role = ParseRole(node);
    if (!role.ok() || *role == Role::kWorker) {
      return Status::InvalidArgument(
          "cluster.fail_node = \"{}\": one of server, evaluator, data or "
          "coordinator (workers: cluster.fail_worker)",
          node);
    }
    o.fail_role = *role;
  }
  o.fail_after = std::chrono::milliseconds(
      static_cast<int64_t>(c.GetFloat("cluster.fail_after_s") * 1000));
  return Status::Ok();
}

// Timeouts, checkpoints, restarts and /metrics.
Status ResolveLifecycle(const Config& c, ClusterRunOptions& o) {
  o.request_timeout =
      std::chrono::milliseconds(c.GetInt("cluster.request_timeout_ms"));
  o.heartbeat_interval =
      std::chrono::milliseconds(c.GetInt("cluster.heartbeat_interval_ms"));
  o.heartbeat_timeout =
      std::chrono::milliseconds(c.GetInt("cluster.heartbeat_timeout_ms"));
  o.checkpoint_every_updates = c.GetInt("checkpoint.every_updates");
  o.checkpoint_every_s = c.GetFloat("checkpoint.every_s");
  o.checkpoint_keep = static_cast<int>(c.GetInt("checkpoint.keep"));
  o.resume = c.GetBool("checkpoint.resume");
  o.restart = c.GetBool("cluster.restart");
  o.min_workers = static_cast<int>(c.GetInt("cluster.min_workers"));
  o.max_workers = static_cast<int>(c.GetInt("cluster.max_workers"));
  const int n = static_cast<int>(c.GetInt("cluster.workers"));
  if (o.min_workers > n || (o.max_workers > 0 && o.max_workers < n)) {
    return Status::InvalidArgument(
        "cluster.workers = {} is outside cluster.min_workers = {} .. "
        "cluster.max_workers = {}{}",
        n, o.min_workers, o.max_workers,
        o.max_workers == 0 ? " (0: no upper bound)" : "");
  }
  o.max_restarts = static_cast<int>(c.GetInt("cluster.max_restarts"));
  o.restart_timeout = std::chrono::milliseconds(
      static_cast<int64_t>(c.GetFloat("cluster.restart_timeout_s") * 1000));
  o.leave_on_loss = c.GetBool("cluster.leave_on_loss");
  o.forward_metrics = c.GetBool("cluster.forward_metrics");
  if (o.leave_on_loss && o.checkpoint_every_updates <= 0 &&
      o.checkpoint_every_s <= 0) {
    return Status::InvalidArgument(
        "cluster.leave_on_loss = true goes on from the newest checkpoint: "
        "set checkpoint.every_updates or checkpoint.every_s too");
  }
  if (o.restart && o.checkpoint_every_updates <= 0 &&
      o.checkpoint_every_s <= 0) {
    return Status::InvalidArgument(
        "cluster.restart = true restarts from the newest checkpoint: set "
        "checkpoint.every_updates or checkpoint.every_s too");
  }
  o.metrics_address = c.GetString("cluster.metrics_address");
  if (!o.metrics_address.empty()) {
    std::string host;
    int port = 0;
    RETURN_IF_ERROR(ParseHostPort(o.metrics_address, "cluster.metrics_address",
                                  &host, &port));
  }
  return Status::Ok();
}

// The parameter-server knobs (sync, async, ssp, easgd).
Status ResolveServers(const Config& c, ClusterRunOptions& o) {
  const int n = o.roles.num_workers();
  const int64_t k = c.GetInt("cluster.updates_per_step");
  if (k > n) {
    return Status::InvalidArgument(
        "cluster.updates_per_step = {} is more than cluster.workers = {} (k of "
        "n needs k <= n)",
        k, n);
  }
  o.pull_interval = c.GetInt("cluster.pull_interval");
  o.overlap = c.GetBool("cluster.overlap");
  if (o.overlap && o.mode != RunMode::kAsync) {
    return Status::InvalidArgument(
        "cluster.overlap = true needs cluster.mode = \"async\" (it is \"{}\"): "
        "sync and ssp wait for their step or clock before computing",
        RunModeName(o.mode));
  }
  ASSIGN_OR_RETURN(o.compression,
                   ParseCompression(c.GetString("cluster.compression")));
  if (o.compression != Compression::kNone && !UsesServers(o.mode)) {
    return Status::InvalidArgument(
        "cluster.compression = \"{}\" compresses pushes to parameter "
        "servers; cluster.mode = \"{}\" has none (use sync, async, ssp or "
        "easgd, or compression = \"none\")",
        CompressionName(o.compression), RunModeName(o.mode));
  }
  o.compress_pulls = o.compression != Compression::kNone &&
                     c.GetBool("cluster.compress_pulls");
  o.staleness = o.mode == RunMode::kSsp ? c.GetInt("cluster.staleness") : -1;
  const bool sync = o.mode == RunMode::kSync;
  o.updates_per_step = k > 0 ? static_cast<int>(k) : n;
  o.defer_late = c.GetString("cluster.late_gradients") == "defer";
  o.inverse_staleness = c.GetString("cluster.lr_staleness") == "inverse";
  o.server_rate_scale = (!sync && o.adapt) ? 1.0 / n : 1.0;
  o.sum_gradients = c.GetString("cluster.sync_reduce") == "sum";
  // Every range must close the same steps with the same gradients: with
  // several ranges (several servers, or pipelining's ranges on one), one
  // leads and the others follow (LeadRange).
  o.leader_first = sync && k > 0 && k < n;
  o.gradients_per_update = sync ? o.updates_per_step : 1;
  o.inline_server = c.GetBool("cluster.inline_server");
  return Status::Ok();
}

// Layer-wise pipelining, layer waits and row slices.
void ResolvePipelining(const Config& c, ClusterRunOptions& o) {
  // Not with cluster.overlap (which has its own overlap).
  o.pipeline = c.GetBool("cluster.pipeline");
  o.layer_wait = c.GetBool("cluster.layer_wait");
  // Negative: the default for nodes that talk over a network transport
  // (the threads launcher turns it off in process over inproc).
  const double slice_kb = c.GetFloat("cluster.slice_kb");
  o.slice_floats = static_cast<int64_t>((slice_kb < 0 ? 256 : slice_kb) * 1024 /
                                        sizeof(float));
  if (c.GetBool("train.cuda_graph")) {
    // The captured step runs no host code between its layers: no per-layer
    // waits or uploads, no hooks that send a range (worker/step_graph.h).
    o.pipeline = false;
    o.layer_wait = false;
    o.slice_floats = 0;
  }
  if (o.pipeline && FamilyOf(o.mode) == ExchangeFamily::kPushPull &&
      !o.overlap) {
    o.pipeline_floats = std::max<int64_t>(
        1, static_cast<int64_t>(c.GetFloat("cluster.pipeline_kb") * 1024 /
                                sizeof(float)));
  }
}

// The decentralized modes' knobs.
Status ResolveDecentralized(const Config& c, ClusterRunOptions& o) {
  o.average_every = c.GetInt("cluster.average_every");
  o.elastic_alpha = c.GetFloat("cluster.elastic_alpha");
  o.topology = c.GetString("cluster.topology") == "torus" ? Topology::kTorus
                                                          : Topology::kRing;
  o.gossip_p = c.GetFloat("cluster.gossip_p");
  // A captured step has no gradient hooks to fill the buckets.
  o.bucket_overlap =
      c.GetBool("cluster.bucket_overlap") && !c.GetBool("train.cuda_graph");
  o.gloo_always = c.GetString("cluster.collective") == "gloo";
  o.tau_up = c.GetInt("cluster.tau_up");
  o.tau_down = c.GetInt("cluster.tau_down");
  o.tree_fanout = static_cast<int>(c.GetInt("cluster.tree_fanout"));
  o.bucket_floats = static_cast<int64_t>(c.GetFloat("cluster.bucket_mb") *
                                         (1 << 20) / sizeof(float));
  if (o.bucket_floats < 1) o.bucket_floats = 1;
  if (IsDecentralized(o.mode) && o.pull_interval != 1) {
    return Status::InvalidArgument(
        "cluster.pull_interval = {} applies to the parameter-server modes, "
        "not to cluster.mode = \"{}\"",
        o.pull_interval, RunModeName(o.mode));
  }
  return Status::Ok();
}

// How the launchers connect the nodes.
void ResolveTransport(const Config& c, ClusterRunOptions& o) {
  o.transport = c.GetString("cluster.transport");
  // The config schema allows only its spellings.
  o.ucx_shared_memory =
      UcxSharedMemoryFromConfig(c.GetString("cluster.ucx_shared_memory"))
          .value_or(UcxOptions::SharedMemory::kAuto);
  o.spin = std::chrono::microseconds(c.GetInt("cluster.spin_us"));
}

}  // namespace

Result<ClusterRunOptions> ClusterRunOptions::FromConfig(const Config& c) {
  ClusterRunOptions o;
  ASSIGN_OR_RETURN(o.mode, ParseRunMode(c.GetString("cluster.mode")));
  RETURN_IF_ERROR(ResolveRoles(c, o));
  RETURN_IF_ERROR(ResolveTraining(c, o));
  RETURN_IF_ERROR(ResolveServers(c, o));
  ResolveReporting(c, o);
  RETURN_IF_ERROR(ResolveFaults(c, o));
  RETURN_IF_ERROR(ResolveLifecycle(c, o));
  ResolvePipelining(c, o);
  RETURN_IF_ERROR(ResolveDecentralized(c, o));
  ResolveTransport(c, o);
  ASSIGN_OR_RETURN(o.links, LinksFromConfig(c, o.roles));
  ASSIGN_OR_RETURN(o.pace,
                   WorkerPaceOptions::FromConfig(c, o.roles.num_workers()));
  return o;
}

Result<LocalRunOptions> LocalRunOptions::FromConfig(const Config& c) {
  LocalRunOptions o;
  o.threads = static_cast<int>(c.GetInt("train.threads"));
  o.seed = static_cast<uint64_t>(c.GetInt("run.seed"));
  o.model = ModelOptions::FromConfig(c);
  o.device = DeviceOptions::FromConfig(c);
  o.batch_size = c.GetInt("train.batch_size");
  ASSIGN_OR_RETURN(o.sampler, ParseSamplerKind(c.GetString("data.sampler")));
  o.loss_aware_max_boost = c.GetFloat("data.loss_aware.max_boost");
  o.shuffle = c.GetBool("data.shuffle");
  o.augment = c.GetBool("data.augment");
  ASSIGN_OR_RETURN(o.shard_options, ShardOptionsFromConfig(c, 1));
  o.sharding_set = !c.GetString("data.shard_plan").empty() ||
                   c.GetString("data.sharding.method") != "mod";
  o.iterations = c.GetInt("train.iterations");
  o.epochs = c.GetInt("train.epochs");
  if (o.iterations == 0 && o.epochs == 0)
    return Status::InvalidArgument(
        "nothing to train: train.iterations = 0 and train.epochs = 0");
  o.eval_every = c.GetInt("train.eval_every");
  o.log_every = c.GetInt("train.log_every");
  o.eval_batch = c.GetInt("train.eval_batch_size");
  const std::string on = c.GetString("train.local_optimizer");
  o.optimizer_on = on == "torch"  ? LocalOptimizer::kTorch
                   : on == "host" ? LocalOptimizer::kHost
                                  : LocalOptimizer::kAuto;
  o.optimizer = OptimizerOptions::FromConfig(c);
  o.schedule = LrSchedule::FromConfig(c, 1);
  o.checkpoint_every = c.GetInt("checkpoint.every_updates");
  o.checkpoint_every_s = c.GetFloat("checkpoint.every_s");
  o.checkpoint_keep = static_cast<int>(c.GetInt("checkpoint.keep"));
  o.resume = c.GetBool("checkpoint.resume");
  o.profile_from = c.GetInt("train.profile_from");
  o.profile_steps = c.GetInt("train.profile_steps");
  return o;
}

}  // namespace strata
