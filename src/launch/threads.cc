#include "launch/threads.h"

#include <ATen/Parallel.h>

#include <memory>
#include <thread>
#include <vector>

#include "collective/inproc.h"
#include "common/log.h"
#include "common/timeline.h"
#include "coordinator/cluster_checkpoints.h"
#include "coordinator/metrics_endpoint.h"
#include "launch/roles.h"
#include "models/cpu_threads.h"
#include "models/models.h"
#include "transport/factory.h"
#include "transport/spin_wait.h"
#include "worker/plan_probe.h"

namespace strata {
namespace {

// The config as the threads launcher runs it: cluster.slice_kb's default
// is no row slices between threads over the in-process transport, where a
// round trip is short and the slices' own cost was more than they hid
// (docs/results/2026-11-27-row-slices.md).
Result<Config> ThreadsConfig(const Config& given) {
  Config config = given;
  if (config.GetFloat("cluster.slice_kb") < 0 &&
      config.GetString("cluster.transport") == "inproc") {
    RETURN_IF_ERROR(config.ApplyOverride("cluster.slice_kb=0"));
  }
  if (config.GetString("train.local_optimizer") != "auto") {
    LogWarning(
        "train.local_optimizer = \"{}\" applies to cluster.mode = local: in "
        "cluster modes the servers (or the workers' exchange) apply the "
        "update; ignored",
        config.GetString("train.local_optimizer"));
  }
  return config;
}

// One bound transport per node: one fabric (inproc) or one ZeroMQ context
// (tcp: one CURVE handler) for every node of the process.
// `fabric` carries the in-process transport's messages.
Result<std::vector<std::unique_ptr<Transport>>> MakeTransports(
    const ClusterRunOptions& o, std::optional<CurveKeys> curve,
    InProcFabric& fabric) {
  if (curve && o.transport == "inproc") {
    return Status::InvalidArgument(
        "cluster.security = \"curve\" authenticates and encrypts ZeroMQ TCP, "
        "but this run's nodes are threads of one process talking over the "
        "in-process transport (cluster.transport = \"inproc\"), which no "
        "peer outside the process can reach: set cluster.transport = "
        "\"tcp\" (CURVE on loopback), run with --processes or strata node, "
        "or leave cluster.security = \"none\"");
  }
  TransportOptions options;
  options.fabric = &fabric;
  options.curve = std::move(curve);
  options.ucx_shared_memory = o.ucx_shared_memory;
  options.links = o.links;
  options.link_seed = o.seed;
  if (o.transport == "tcp") {
    ASSIGN_OR_RETURN(options.zmq_context, ZmqContext::Create(1));
  }
  ASSIGN_OR_RETURN(const std::string local, LocalEndpoint(o.transport));
  std::vector<std::unique_ptr<Transport>> out(o.roles.num_nodes());
  for (NodeId id = 0; id < o.roles.num_nodes(); ++id) {
    ASSIGN_OR_RETURN(out[id], NewBoundTransport(id, local, options));
  }
  return out;
}

std::string DescribeTransport(const std::string& kind, bool curve) {
  if (kind == "ucx") return "UCX (loopback)";
  if (kind == "tcp") return curve ? "tcp (loopback, CURVE)" : "tcp (loopback)";
  return "the in-process transport";
}

void LogCluster(const ClusterPlan& plan, const std::string& transport) {
  const ClusterRunOptions& o = plan.options;
  LogInfo(
      "cluster: mode {}, {} servers, {} workers, in one process over {}; {} "
      "parameters ({}); per-worker batch {}, {} iterations per worker{}{}",
      RunModeName(o.mode), o.roles.num_servers(), o.roles.num_workers(),
      transport, plan.num_params, plan.layout.ToString(), o.worker_batch,
      o.iterations,
      o.data_servers > 0
          ? fmt::format("; {} data servers ({} assignment)", o.data_servers,
                        AssignmentName(o.assignment))
          : std::string(),
      o.compression == Compression::kNone
          ? std::string()
          : fmt::format("; {} compression of pushes{}",
                        CompressionName(o.compression),
                        o.compress_pulls ? " and pulls" : ""));
}

}  // namespace

Result<RunSummary> TrainCluster(const Config& given, const DatasetSplits& data,
                                const RunDirectory& run_dir,
                                const std::atomic<bool>* stop) {
  ASSIGN_OR_RETURN(const Config config, ThreadsConfig(given));
  // A GPU that is not there fails the run before anything (only the
  // workers and the evaluator compute on it; PlaceModel checks in them).
  const DeviceOptions where = DeviceOptions::FromConfig(config);
  RETURN_IF_ERROR(CheckDevice(where));
  ASSIGN_OR_RETURN(ClusterPlan plan, MakeClusterPlan(config, data));
  const ClusterRunOptions& o = plan.options;
  // The GPUs are counted only for "cuda:*" (counting starts CUDA).
  const std::string shared =
      SharedGpuNote(where, o.roles.num_workers(),
                    where.device == kEveryGpu ? VisibleGpus() : 1);
  if (!shared.empty()) LogWarning("{}", shared);
  at::set_num_threads(ThreadsPerWorker(o));
  // Several nodes compute at once: one BLAS thread each (LibTorch's pool
  // is theirs), unless the environment says otherwise.
  LogDebug("cluster: {}", SetBlasThreads(1));
  // Only in-process waits spin (spin_wait.h); the previous budget again
  // after this run.
  const ScopedSpinWait spin(o.spin);
  RETURN_IF_ERROR(CheckMetricsAddress(o.metrics_address));
  ASSIGN_OR_RETURN(std::shared_ptr<const Checkpoint> resume_from,
                   CheckResumable(config, o, run_dir));
  ASSIGN_OR_RETURN(std::optional<CurveKeys> curve, CurveKeysFromConfig(config));
  const bool secure = curve.has_value();
  InProcFabric fabric;
  CollectiveHub collectives;  // the workers' groups, through memory
  ASSIGN_OR_RETURN(auto transports,
                   MakeTransports(o, std::move(curve), fabric));
  LogCluster(plan, DescribeTransport(o.transport, secure));
  LogEmulation(config, o.pace);
  const timeline::ScopedRecording recording(o.timeline, o.timeline_events);
  std::optional<ClusterSummary> summary;
  std::vector<float> final_params;
  std::vector<RoleContext> contexts(o.roles.num_nodes());
  for (NodeId id = 0; id < o.roles.num_nodes(); ++id) {
    RoleContext& ctx = contexts[id];
    RETURN_IF_ERROR(o.roles.RoleOf(id, &ctx.role, &ctx.index));
    ctx.config = &config;
    ctx.plan = &plan;
    ctx.transport = std::move(transports[id]);
    ctx.coordinator = contexts[0].transport->endpoint();
    ctx.run_dir = &run_dir;
    ctx.stop = stop;
    ctx.data = &data;
    ctx.collectives = &collectives;
  }
  contexts[0].resume_from = std::move(resume_from);
  contexts[0].summary = &summary;
  contexts[o.roles.EvaluatorId()].final_params = &final_params;
  std::vector<Status> results(contexts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < contexts.size(); ++i) {
    threads.emplace_back([&contexts, &results, i] {
      RoleContext& ctx = contexts[i];
      // A failed node logged its error; the coordinator reports the loss.
      results[i] = RunRole(ctx);
      if (results[i].ok()) return;
      if (ctx.role == Role::kEvaluator)
        LogWarning("evaluator: {}", results[i].message());
      else
        LogDebug("{}: {}", ctx.who(), results[i].message());
    });
  }
  for (auto& t : threads) t.join();
  // The coordinator's result is the run's.
  RETURN_IF_ERROR(results[0]);
  if (!summary)
    return Status::Internal("the coordinator handed back no summary");
  RunSummary s = summary->Brief(data.train.size(), plan.num_params);
  s.final_params = std::move(final_params);
  return s;
}

}  // namespace strata
