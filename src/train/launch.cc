#include "train/launch.h"

#include <ATen/Parallel.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "common/log.h"
#include "train/data_config.h"
#include "train/roles.h"
#include "transport/zmq_transport.h"

extern char** environ;

namespace strata {
namespace {

using std::chrono::milliseconds;

Result<std::unique_ptr<Transport>> BoundTransport(NodeId id,
                                                  const std::string& endpoint) {
  ASSIGN_OR_RETURN(auto t, NewZmqTransport(id, ZmqOptions{}));
  Status st = t->Bind(endpoint);
  if (!st.ok())
    return st.WithContext(fmt::format("node {} binding {}", id, endpoint));
  return t;
}

ClusterShape ShapeOf(const Config& c) {
  ClusterShape shape;
  shape.num_servers = static_cast<int>(c.GetInt("cluster.servers"));
  shape.num_workers = static_cast<int>(c.GetInt("cluster.workers"));
  shape.evaluator = true;
  return shape;
}

}  // namespace

Status RoleFromRank(const Config& config, Role* role, int* index) {
  for (const char* var :
       {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"}) {
    const char* v = std::getenv(var);
    if (v == nullptr) continue;
    char* end = nullptr;
    long rank = std::strtol(v, &end, 10);
    if (*v == '\0' || *end != '\0' || rank < 0) {
      return Status::InvalidArgument("{}='{}' is not a rank", var, v);
    }
    Status st = ShapeOf(config).RoleOf(static_cast<NodeId>(rank), role, index);
    if (!st.ok()) return st.WithContext(fmt::format("{}={}", var, rank));
    return Status::Ok();
  }
  return Status::NotFound(
      "no --role given and no MPI/Slurm rank in the environment "
      "(OMPI_COMM_WORLD_RANK, "
      "PMI_RANK, PMIX_RANK, SLURM_PROCID)");
}

Status RunNode(const Config& config, Role role, int index,
               const std::string& coordinator, const std::string& bind,
               const RunDirectory& run_dir, const std::atomic<bool>* stop) {
  const ClusterShape shape = ShapeOf(config);
  const NodeId id = shape.IdOf(role, index);
  Role check;
  int check_index;
  RETURN_IF_ERROR(shape.RoleOf(id, &check, &check_index));
  if (check != role || check_index != index) {
    return Status::InvalidArgument(
        "{} {} does not exist in a cluster of {} servers and {} workers",
        RoleName(role), index, shape.num_servers, shape.num_workers);
  }
  const std::string who = shape.Describe(id);
  if (role == Role::kCoordinator) {
    ASSIGN_OR_RETURN(ClusterRunOptions o,
                     ClusterRunOptions::FromConfig(config));
    o.shape.evaluator = true;
    ASSIGN_OR_RETURN(auto t, BoundTransport(id, coordinator));
    LogInfo("{} listening at {}", who, t->endpoint());
    auto summary = RunCoordinatorRole(config, o, std::move(t), run_dir, stop);
    return summary.status();
  }
  ASSIGN_OR_RETURN(DatasetSplits data, LoadDatasetFromConfig(config));
  ASSIGN_OR_RETURN(ClusterPlan plan,
                   ClusterPlan::Make(config, data, role == Role::kWorker));
  plan.options.shape.evaluator = true;
  ASSIGN_OR_RETURN(auto t, BoundTransport(id, bind));
  // One process per node: LibTorch threads per process as configured
  // (0 = this machine's cores shared among the workers).
  int64_t threads = config.GetInt("cluster.threads_per_worker");
  if (threads == 0) {
    threads = std::max<int64_t>(
        1, std::thread::hardware_concurrency() / shape.num_workers);
  }
  at::set_num_threads(static_cast<int>(threads));
  LogInfo("{} at {} joining the coordinator at {}", who, t->endpoint(),
          coordinator);
  switch (role) {
    case Role::kServer:
      return RunServerRole(config, plan, index, std::move(t), coordinator, stop)
          .WithContext(who);
    case Role::kWorker: {
      auto m = RunWorkerRole(config, plan, index, data, std::move(t),
                             coordinator, &run_dir, stop);
      return m.status().WithContext(who);
    }
    case Role::kEvaluator:
      return RunEvaluatorRole(config, plan, data, std::move(t), coordinator,
                              &run_dir, stop)
          .WithContext(who);
    case Role::kCoordinator:
      break;
  }
  return Status::Internal("unreachable");
}

Result<nlohmann::json> TrainProcesses(const Config& config,
                                      const RunDirectory& run_dir,
                                      const std::string& self_exe,
                                      const std::atomic<bool>* stop) {
  const ClusterShape shape = ShapeOf(config);
  ASSIGN_OR_RETURN(ClusterRunOptions o, ClusterRunOptions::FromConfig(config));
  o.shape.evaluator = true;
  ASSIGN_OR_RETURN(auto coord, BoundTransport(0, "tcp://127.0.0.1:*"));
  const std::string endpoint = coord->endpoint();
  const std::string config_path = run_dir.File("config.toml");

  // Several processes share the cores: one BLAS thread each.
  setenv("OPENBLAS_NUM_THREADS", "1", 0);
  std::vector<pid_t> pids;
  nlohmann::json pid_map = nlohmann::json::object();
  for (NodeId id = 1; id < shape.num_nodes(); ++id) {
    Role role;
    int index;
    RETURN_IF_ERROR(shape.RoleOf(id, &role, &index));
    std::vector<std::string> args = {
        self_exe,        "node",    "--role",
        RoleName(role),  "--index", std::to_string(index),
        "--coordinator", endpoint,  "--run-dir",
        run_dir.path(),  "-c",      config_path};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid;
    int rc = posix_spawn(&pid, self_exe.c_str(), nullptr, nullptr, argv.data(),
                         environ);
    if (rc != 0) {
      for (pid_t p : pids) ::kill(p, SIGTERM);
      return Status::IoError("cannot start {} as a process ({}): {}",
                             shape.Describe(id), self_exe, std::strerror(rc));
    }
    pids.push_back(pid);
    pid_map[shape.Describe(id)] = pid;
  }
  RETURN_IF_ERROR(run_dir.WriteJson("pids.json", pid_map));
  LogInfo(
      "cluster: {} processes ({} servers, {} workers, evaluator) around the "
      "coordinator at {}",
      pids.size(), shape.num_servers, shape.num_workers, endpoint);

  auto summary = RunCoordinatorRole(config, o, std::move(coord), run_dir, stop);

  // Children end when the coordinator says stop; any still running after
  // a grace period are ended by PID.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (pid_t pid : pids) {
    int status = 0;
    while (::waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        LogWarning(
            "process {} still running after the run ended: terminating it",
            pid);
        ::kill(pid, SIGTERM);
        std::this_thread::sleep_for(milliseconds(500));
        if (::waitpid(pid, &status, WNOHANG) == 0) {
          ::kill(pid, SIGKILL);
          ::waitpid(pid, &status, 0);
        }
        break;
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
  }
  return summary;
}

}  // namespace strata
