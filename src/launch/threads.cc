#include "train/cluster_run.h"

#include <torch/torch.h>

#include <memory>
#include <thread>

#include "common/log.h"
#include "models/models.h"
#include "train/data_service.h"
#include "train/roles.h"
#include "transport/curve_keys.h"
#include "transport/inproc_transport.h"
#include "transport/spin_wait.h"
#include "transport/ucx_transport.h"
#include "transport/zmq_transport.h"

namespace strata {
namespace {

// Makes bound transports for the nodes of one in-process cluster; over TCP
// they share one ZeroMQ context (and so one CURVE authentication handler).
class TransportFactory {
 public:
  TransportFactory(std::string kind, std::optional<CurveKeys> curve,
                   const std::string& ucx_shared_memory)
      : tcp_(kind == "tcp"),
        ucx_(kind == "ucx"),
        // The config schema allows only its spellings.
        ucx_shared_memory_(UcxSharedMemoryFromConfig(ucx_shared_memory)
                               .value_or(UcxOptions::SharedMemory::kAuto)),
        curve_(std::move(curve)) {}
  bool curve() const { return curve_.has_value(); }
  Result<std::unique_ptr<Transport>> Make(NodeId id) {
    std::unique_ptr<Transport> t;
    if (ucx_) {
      UcxOptions uo;
      uo.shared_memory = ucx_shared_memory_;  // cluster.ucx_shared_memory
      ASSIGN_OR_RETURN(t, NewUcxTransport(id, uo));
      RETURN_IF_ERROR(t->Bind("ucx://127.0.0.1:*"));
    } else if (tcp_) {
      if (context_ == nullptr) {
        ASSIGN_OR_RETURN(context_, ZmqContext::Create(1));
      }
      ZmqOptions zo;
      zo.context = context_;
      zo.curve = curve_;
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
  const bool ucx_;
  const UcxOptions::SharedMemory ucx_shared_memory_;
  const std::optional<CurveKeys> curve_;
  InProcFabric fabric_;
  std::shared_ptr<ZmqContext> context_;
};

// Runs a role's body on its thread: an exception (a bug, or LibTorch
// throwing past a boundary) is logged with the role's name and stops only
// that role; its node goes silent and the coordinator reports it lost.
template <typename F>
void Guarded(const std::string& who, F&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    LogError("{}: stopped by an exception: {}", who, e.what());
  }
}

}  // namespace

Result<RunSummary> TrainCluster(const Config& given, const DatasetSplits& data,
                                const RunDirectory& run_dir,
                                const std::atomic<bool>* stop) {
  Config config = given;
  // cluster.slice_kb's default: no row slices between threads over the
  // in-process transport, where a round trip is short and the slices' own
  // cost was more than they hid (docs/benchmarks.md, "Row slices").
  if (config.GetFloat("cluster.slice_kb") < 0 &&
      config.GetString("cluster.transport") == "inproc") {
    RETURN_IF_ERROR(config.ApplyOverride("cluster.slice_kb=0"));
  }
  // A GPU that is not there fails the run before any node starts (only the
  // workers and the evaluator compute on it; PlaceModel checks in them).
  RETURN_IF_ERROR(CheckDevice(DeviceOptions::FromConfig(config)));
  if (config.GetString("train.local_optimizer") != "auto") {
    LogWarning(
        "train.local_optimizer = \"{}\" applies to cluster.mode = local: in "
        "cluster modes the servers (or the workers' exchange) apply the "
        "update; ignored",
        config.GetString("train.local_optimizer"));
  }
  ASSIGN_OR_RETURN(ClusterPlan plan, ClusterPlan::Make(config, data));
  const ClusterRunOptions& o = plan.options;
  const RoleTable& roles = o.roles;
  torch::set_num_threads(ThreadsPerWorker(config, roles.num_workers()));
  // Only in-process waits spin (spin_wait.h); the previous budget again
  // after this run.
  const ScopedSpinWait spin(
      std::chrono::microseconds(config.GetInt("cluster.spin_us")));

  RETURN_IF_ERROR(CheckMetricsAddress(o));
  ASSIGN_OR_RETURN(std::shared_ptr<const Checkpoint> resume_from,
                   CheckResumable(config, o, run_dir));
  const std::string kind = config.GetString("cluster.transport");
  const bool tcp = kind == "tcp";
  ASSIGN_OR_RETURN(std::optional<CurveKeys> curve, CurveKeysFromConfig(config));
  if (curve && kind == "ucx") {
    return Status::InvalidArgument(
        "cluster.security = \"curve\" secures ZeroMQ TCP; the UCX transport "
        "(cluster.transport = \"ucx\") has no authentication: use \"tcp\" "
        "with CURVE, or security = \"none\"");
  }
  if (curve && !tcp) {
    return Status::InvalidArgument(
        "cluster.security = \"curve\" authenticates and encrypts ZeroMQ TCP, "
        "but this run's nodes are threads of one process talking over the "
        "in-process transport (cluster.transport = \"inproc\"), which no "
        "peer outside the process can reach: set cluster.transport = "
        "\"tcp\" (CURVE on loopback), run with --processes or strata node, "
        "or leave cluster.security = \"none\"");
  }
  TransportFactory factory(kind, std::move(curve),
                           config.GetString("cluster.ucx_shared_memory"));
  std::vector<std::unique_ptr<Transport>> transports(roles.num_nodes());
  for (NodeId id = 0; id < roles.num_nodes(); ++id) {
    ASSIGN_OR_RETURN(transports[id], factory.Make(id));
  }
  const std::string coordinator = transports[0]->endpoint();
  LogInfo(
      "cluster: mode {}, {} servers, {} workers, in one process over {}; {} "
      "parameters "
      "({}); per-worker batch {}, {} iterations per worker{}{}",
      RunModeName(o.mode), roles.num_servers(), roles.num_workers(),
      kind == "ucx" ? "UCX (loopback)"
      : tcp ? (factory.curve() ? "tcp (loopback, CURVE)" : "tcp (loopback)")
            : "the in-process transport",
      plan.num_params, plan.layout.ToString(), o.worker_batch, o.iterations,
      o.data_servers > 0
          ? fmt::format("; {} data servers ({} assignment)", o.data_servers,
                        AssignmentName(o.assignment))
          : std::string(),
      o.compression == Compression::kNone
          ? std::string()
          : fmt::format("; {} compression of pushes{}",
                        CompressionName(o.compression),
                        o.compress_pulls ? " and pulls" : ""));

  Result<nlohmann::json> summary = Status::Internal("coordinator did not run");
  std::vector<float> final_params;
  std::vector<std::thread> threads_list;
  threads_list.emplace_back([&] {
    Guarded("coordinator", [&] {
      summary = RunCoordinatorRole(config, o, std::move(transports[0]), run_dir,
                                   stop, std::move(resume_from));
    });
  });
  for (int s = 0; s < roles.num_servers(); ++s) {
    threads_list.emplace_back([&, s] {
      Guarded(roles.Describe(roles.ServerId(s)), [&] {
        Status st = RunServerRole(config, plan.options, s,
                                  std::move(transports[roles.ServerId(s)]),
                                  coordinator, stop);
        if (!st.ok()) LogDebug("server {}: {}", s, st.message());
      });
    });
  }
  for (int w = 0; w < roles.num_workers(); ++w) {
    threads_list.emplace_back([&, w] {
      Guarded(roles.Describe(roles.WorkerId(w)), [&] {
        // A failed worker logged its error; the coordinator reports the loss.
        auto metrics = RunWorkerRole(config, plan, w, data,
                                     std::move(transports[roles.WorkerId(w)]),
                                     coordinator, &run_dir, stop);
        if (!metrics.ok())
          LogDebug("worker {}: {}", w, metrics.status().message());
      });
    });
  }
  for (int d = 0; d < roles.num_data_servers(); ++d) {
    threads_list.emplace_back([&, d] {
      Guarded(roles.Describe(roles.DataServerId(d)), [&] {
        Status st = RunDataRole(config, plan, d, data,
                                std::move(transports[roles.DataServerId(d)]),
                                coordinator, &run_dir, stop);
        if (!st.ok()) LogDebug("data server {}: {}", d, st.message());
      });
    });
  }
  threads_list.emplace_back([&] {
    Guarded("evaluator", [&] {
      Status st = RunEvaluatorRole(config, plan, data,
                                   std::move(transports[roles.EvaluatorId()]),
                                   coordinator, &run_dir, stop, &final_params);
      if (!st.ok()) LogWarning("evaluator: {}", st.message());
    });
  });
  for (auto& t : threads_list) t.join();
  if (!summary.ok()) return summary.status();

  const nlohmann::json& j = *summary;
  RunSummary s;
  s.final_train_loss = j.value("final_train_loss", 0.0);
  s.final_train_acc = j.value("final_train_acc", 0.0);
  s.final_val_loss = j.value("final_val_loss", 0.0);
  s.final_val_acc = j.value("final_val_acc", 0.0);
  s.wall_s = j.value("wall_s", 0.0);
  s.train_s = j.value("train_s", 0.0);
  s.samples_per_s = j.value("samples_per_s", 0.0);
  s.steps = j.value("steps", int64_t{0});
  s.samples = j.value("samples", int64_t{0});
  s.epochs = static_cast<double>(s.samples) / data.train.size();
  s.parameters = plan.num_params;
  s.interrupted = j.value("interrupted", false);
  s.final_params = std::move(final_params);
  return s;
}

}  // namespace strata
