#include "train/launch.h"

#include <ATen/Parallel.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "common/fs.h"
#include "common/log.h"
#include "models/models.h"
#include "train/checkpoint.h"
#include "train/data_config.h"
#include "train/data_service.h"
#include "train/roles.h"
#include "transport/curve_keys.h"
#include "transport/ucx_transport.h"
#include "transport/zmq_transport.h"

extern char** environ;

namespace strata {
namespace {

using std::chrono::milliseconds;

// The IPv4 address of `host` (a name or a dotted address).
Result<std::string> Resolve(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0 || found == nullptr) {
    return Status::NotFound("cannot resolve host '{}': {}", host,
                            ::gai_strerror(rc));
  }
  char text[INET_ADDRSTRLEN] = {};
  const auto* in = reinterpret_cast<const sockaddr_in*>(found->ai_addr);
  ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
  ::freeaddrinfo(found);
  return std::string(text);
}

// The local address this machine uses to reach `host`:`port` (the route's
// source address; a UDP connect sends nothing).
Result<std::string> LocalAddressToward(const std::string& host,
                                       const std::string& port) {
  ASSIGN_OR_RETURN(std::string ip, Resolve(host));
  sockaddr_in peer{};
  peer.sin_family = AF_INET;
  peer.sin_port = htons(static_cast<uint16_t>(std::atoi(port.c_str())));
  ::inet_pton(AF_INET, ip.c_str(), &peer.sin_addr);
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) return Status::IoError("socket: {}", std::strerror(errno));
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  const bool ok =
      ::connect(fd, reinterpret_cast<const sockaddr*>(&peer), sizeof(peer)) ==
          0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) {
    return Status::Unavailable("no route from this machine to {} ({}): {}",
                               host, ip, std::strerror(err));
  }
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text));
  return std::string(text);
}

bool IsLoopbackHost(const std::string& host) {
  return host.rfind("127.", 0) == 0 || host == "localhost" || host == "::1" ||
         host == "[::1]";
}

// A ZeroMQ transport bound to `endpoint`, with CURVE when `curve` is set. A
// node that binds a wildcard address (tcp://0.0.0.0:* or tcp://*:*)
// advertises the address it uses to reach the coordinator, so peers on other
// machines can connect to it. Without CURVE, a node that listens or
// advertises beyond loopback says so in a warning (one per process: one
// transport per process is bound here, the launcher's coordinator always on
// loopback).
Result<std::unique_ptr<Transport>> BoundTransport(
    NodeId id, const std::string& endpoint,
    const std::optional<CurveKeys>& curve,
    const std::string& coordinator = "") {
  if (endpoint.rfind("ucx://", 0) == 0) {
    // cluster.transport = "ucx" (docs/transport.md, UCX backend): no CURVE,
    // and the endpoint names the address peers reach.
    if (curve) {
      return Status::InvalidArgument(
          "node {}: cluster.security = \"curve\" secures ZeroMQ TCP; the "
          "UCX transport ({}) has no authentication",
          id, endpoint);
    }
    if (!coordinator.empty() && coordinator.rfind("ucx://", 0) != 0) {
      return Status::InvalidArgument(
          "node {}: bound to {} but the coordinator is at {}: every node of a "
          "cluster speaks the same transport",
          id, endpoint, coordinator);
    }
    ASSIGN_OR_RETURN(auto t, NewUcxTransport(id));
    Status st = t->Bind(endpoint);
    if (!st.ok())
      return st.WithContext(fmt::format("node {} binding {}", id, endpoint));
    return t;
  }
  if (!coordinator.empty() && coordinator.rfind("ucx://", 0) == 0) {
    return Status::InvalidArgument(
        "node {}: the coordinator is at {} (UCX) but this node binds {}: "
        "pass --bind ucx://IP:*",
        id, coordinator, endpoint);
  }
  ZmqOptions options;
  options.curve = curve;
  std::string host, port, chost, cport;
  if (!coordinator.empty() && SplitTcpEndpoint(endpoint, &host, &port) &&
      IsWildcardHost(host) && SplitTcpEndpoint(coordinator, &chost, &cport)) {
    auto local = LocalAddressToward(chost, cport);
    if (!local.ok()) {
      return local.status().WithContext(fmt::format(
          "node {} binding {}: finding the address peers reach", id, endpoint));
    }
    options.advertise_host = *local;
  }
  ASSIGN_OR_RETURN(auto t, NewZmqTransport(id, options));
  Status st = t->Bind(endpoint);
  if (!st.ok())
    return st.WithContext(fmt::format("node {} binding {}", id, endpoint));
  std::string advertised;
  if (!curve && SplitTcpEndpoint(t->endpoint(), &advertised, &port) &&
      SplitTcpEndpoint(endpoint, &host, &port) &&
      (!IsLoopbackHost(host) || !IsLoopbackHost(advertised))) {
    LogWarning(
        "node {} listens at {} ({}) without authentication or encryption: "
        "anyone who reaches that port can push gradients into the model or "
        "stop the run. Set cluster.security = \"curve\" (docs/cluster.md, "
        "Security)",
        id, endpoint, t->endpoint());
  }
  return t;
}

// The coordinator binds the address the others were told; a host name
// (tcp://node001:5555, as under mpirun or srun) is resolved first, since
// ZeroMQ binds interfaces and addresses, not names.
Result<std::string> CoordinatorBindEndpoint(const std::string& coordinator) {
  std::string host, port;
  if (!SplitTcpEndpoint(coordinator, &host, &port) || IsWildcardHost(host)) {
    return coordinator;
  }
  in_addr probe{};
  if (::inet_pton(AF_INET, host.c_str(), &probe) == 1) return coordinator;
  auto ip = Resolve(host);
  if (!ip.ok()) {
    return ip.status().WithContext("--coordinator " + coordinator);
  }
  return "tcp://" + *ip + ":" + port;
}

Result<RoleTable> RolesOf(const Config& c) {
  ASSIGN_OR_RETURN(ClusterRunOptions o, ClusterRunOptions::FromConfig(c));
  return o.roles;
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
    ASSIGN_OR_RETURN(RoleTable roles, RolesOf(config));
    Status st = roles.RoleOf(static_cast<NodeId>(rank), role, index);
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
  ASSIGN_OR_RETURN(const RoleTable roles, RolesOf(config));
  const NodeId id = roles.IdOf(role, index);
  Role check;
  int check_index;
  RETURN_IF_ERROR(roles.RoleOf(id, &check, &check_index));
  if (check != role || check_index != index) {
    return Status::InvalidArgument("{} {} does not exist in a cluster of {}",
                                   RoleName(role), index, roles.ToString());
  }
  const std::string who = roles.Describe(id);
  ASSIGN_OR_RETURN(const std::optional<CurveKeys> curve,
                   CurveKeysFromConfig(config));
  const char* security = curve ? " (CURVE)" : "";
  if (role == Role::kCoordinator) {
    ASSIGN_OR_RETURN(ClusterRunOptions o,
                     ClusterRunOptions::FromConfig(config));
    ASSIGN_OR_RETURN(std::string bind_at, CoordinatorBindEndpoint(coordinator));
    ASSIGN_OR_RETURN(auto t, BoundTransport(id, bind_at, curve));
    LogInfo("{} listening at {}{}", who, t->endpoint(), security);
    auto summary = RunCoordinatorRole(config, o, std::move(t), run_dir, stop);
    return summary.status();
  }
  if (role == Role::kServer) {
    // A server learns the parameter count from the coordinator: no model,
    // no dataset.
    ASSIGN_OR_RETURN(ClusterRunOptions o,
                     ClusterRunOptions::FromConfig(config));
    ASSIGN_OR_RETURN(auto t, BoundTransport(id, bind, curve, coordinator));
    LogInfo("{} at {} joining the coordinator at {}{}", who, t->endpoint(),
            coordinator, security);
    return RunServerRole(config, o, index, std::move(t), coordinator, stop)
        .WithContext(who);
  }
  // A worker fed by the data service loads nothing (it learns the shape
  // from the data servers); data servers and the evaluator load the data.
  ASSIGN_OR_RETURN(ClusterRunOptions options,
                   ClusterRunOptions::FromConfig(config));
  // One process per node: LibTorch threads per process as configured (0 =
  // this machine's cores shared among the workers), set before anything
  // here runs a LibTorch operator.
  at::set_num_threads(ThreadsPerWorker(config, roles.num_workers()));
  const bool streamed = role == Role::kWorker && options.data_servers > 0;
  DatasetSplits data;
  ClusterPlan plan;
  if (streamed) {
    plan.options = options;
  } else {
    ASSIGN_OR_RETURN(data, LoadDatasetFromConfig(config));
    ASSIGN_OR_RETURN(
        plan, ClusterPlan::Make(config, data,
                                role == Role::kWorker || role == Role::kData));
  }
  ASSIGN_OR_RETURN(auto t, BoundTransport(id, bind, curve, coordinator));
  LogInfo("{} at {} joining the coordinator at {}{}", who, t->endpoint(),
          coordinator, security);
  switch (role) {
    case Role::kWorker: {
      auto m = RunWorkerRole(config, plan, index, data, std::move(t),
                             coordinator, &run_dir, stop);
      return m.status().WithContext(who);
    }
    case Role::kEvaluator:
      return RunEvaluatorRole(config, plan, data, std::move(t), coordinator,
                              &run_dir, stop)
          .WithContext(who);
    case Role::kData:
      return RunDataRole(config, plan, index, data, std::move(t), coordinator,
                         &run_dir, stop)
          .WithContext(who);
    case Role::kServer:  // handled above
    case Role::kCoordinator:
      break;
  }
  return Status::Internal("unreachable");
}

namespace {

// One life of a --processes cluster: the coordinator here, every other
// node a child process; returns the coordinator's summary (or its error)
// once every child ended.
Result<nlohmann::json> RunProcessesOnce(
    const Config& config, const ClusterRunOptions& o,
    const RunDirectory& run_dir, const std::string& self_exe,
    const std::optional<CurveKeys>& curve, const std::atomic<bool>* stop,
    std::shared_ptr<const Checkpoint> resume_from) {
  const RoleTable& roles = o.roles;
  // Every node on this machine; over UCX with cluster.transport = "ucx",
  // else ZeroMQ TCP.
  const std::string local = config.GetString("cluster.transport") == "ucx"
                                ? "ucx://127.0.0.1:*"
                                : "tcp://127.0.0.1:*";
  // cluster.ucx_shared_memory: the children (and the coordinator's own
  // transport) take it from the environment (UcxOptions::shared_memory).
  setenv(
      "STRATA_UCX_SHARED_MEMORY",
      UcxSharedMemoryEnvValue(UcxSharedMemoryFromConfig(
                                  config.GetString("cluster.ucx_shared_memory"))
                                  .value_or(UcxOptions::SharedMemory::kAuto)),
      1);
  ASSIGN_OR_RETURN(auto coord, BoundTransport(0, local, curve));
  const std::string endpoint = coord->endpoint();
  const std::string config_path = run_dir.File("config.toml");
  // Several processes share the cores: one BLAS thread each.
  setenv("OPENBLAS_NUM_THREADS", "1", 0);
  // Node id -> its process (a replaced server's entry changes).
  std::mutex pids_mu;
  std::map<NodeId, pid_t> pids;  // GUARDED_BY(pids_mu)
  auto spawn = [&](NodeId id, bool resume) -> Result<pid_t> {
    Role role;
    int index;
    RETURN_IF_ERROR(roles.RoleOf(id, &role, &index));
    std::vector<std::string> args = {
        self_exe,        "node",    "--role",
        RoleName(role),  "--index", std::to_string(index),
        "--coordinator", endpoint,  "--run-dir",
        run_dir.path(),  "-c",      config_path,
        "--bind",        local};
    // A resumed run (or a replacement): the node asks the coordinator for
    // its state.
    if (resume) {
      args.push_back("--set");
      args.push_back("checkpoint.resume=true");
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid;
    int rc = posix_spawn(&pid, self_exe.c_str(), nullptr, nullptr, argv.data(),
                         environ);
    if (rc != 0) {
      return Status::IoError("cannot start {} as a process ({}): {}",
                             roles.Describe(id), self_exe, std::strerror(rc));
    }
    return pid;
  };
  auto write_pids = [&]() {
    nlohmann::json pid_map = nlohmann::json::object();
    for (const auto& [id, pid] : pids) pid_map[roles.Describe(id)] = pid;
    return run_dir.WriteJson("pids.json", pid_map);
  };
  for (NodeId id = 1; id < roles.num_nodes(); ++id) {
    auto pid = spawn(id, config.GetBool("checkpoint.resume"));
    if (!pid.ok()) {
      for (const auto& [other, p] : pids) ::kill(p, SIGTERM);
      return pid.status();
    }
    pids[id] = *pid;
  }
  RETURN_IF_ERROR(write_pids());
  LogInfo("cluster: {} processes ({}) around the coordinator at {}{}",
          pids.size(), roles.ToString(), endpoint, curve ? " (CURVE)" : "");

  // cluster.restart in the free modes: a server or worker process that dies
  // of a signal while the run goes on is started again, under its role and
  // index; it re-joins and takes its state from the newest checkpoint.
  std::atomic<bool> ended{false};
  std::thread watcher;
  if (o.restart && o.mode != RunMode::kSync &&
      FamilyOf(o.mode) != ExchangeFamily::kCollective) {
    watcher = std::thread([&] {
      while (!ended.load()) {
        std::this_thread::sleep_for(milliseconds(100));
        std::lock_guard<std::mutex> lock(pids_mu);
        std::vector<NodeId> restartable = roles.Ids(Role::kServer);
        for (NodeId id : roles.Ids(Role::kWorker)) restartable.push_back(id);
        for (NodeId id : restartable) {
          int status = 0;
          if (::waitpid(pids[id], &status, WNOHANG) != pids[id] ||
              !WIFSIGNALED(status) || ended.load()) {
            continue;
          }
          LogWarning(
              "cluster.restart: {} (pid {}) died of signal {}; "
              "starting it again",
              roles.Describe(id), pids[id], WTERMSIG(status));
          auto pid = spawn(id, /*resume=*/true);
          if (!pid.ok()) {
            LogError("cluster.restart: {}", pid.status().message());
            continue;
          }
          pids[id] = *pid;
          Status st = write_pids();
          if (!st.ok()) LogWarning("pids.json: {}", st.message());
        }
      }
    });
  }

  auto summary = RunCoordinatorRole(config, o, std::move(coord), run_dir, stop,
                                    std::move(resume_from));
  ended = true;
  if (watcher.joinable()) watcher.join();

  // Children end when the coordinator says stop; any still running after
  // a grace period are ended by PID.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (const auto& [id, pid] : pids) {
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

// The newest step any worker logged in metrics.jsonl (0 when none).
int64_t NewestLoggedStep(const RunDirectory& run_dir) {
  std::ifstream in(run_dir.File("metrics.jsonl"));
  int64_t newest = 0;
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.value("step", nlohmann::json()).is_number_integer())
      newest = std::max(newest, j["step"].get<int64_t>());
  }
  return newest;
}

}  // namespace

Result<nlohmann::json> TrainProcesses(const Config& config,
                                      const RunDirectory& run_dir,
                                      const std::string& self_exe,
                                      const std::atomic<bool>* stop) {
  ASSIGN_OR_RETURN(ClusterRunOptions o, ClusterRunOptions::FromConfig(config));
  RETURN_IF_ERROR(CheckMetricsAddress(o));
  // The nodes run on this machine: a GPU that is not there fails the run
  // here rather than in each worker.
  RETURN_IF_ERROR(CheckDevice(DeviceOptions::FromConfig(config)));
  // The first life resumes from the checkpoint checked here; a restarted
  // one reads the newest again.
  ASSIGN_OR_RETURN(std::shared_ptr<const Checkpoint> resume_from,
                   CheckResumable(config, o, run_dir));
  // Checked here, before any child starts, so a bad key is reported once.
  ASSIGN_OR_RETURN(const std::optional<CurveKeys> curve,
                   CurveKeysFromConfig(config));
  Config attempt_config = config;
  nlohmann::json restarts = nlohmann::json::array();
  while (true) {
    ASSIGN_OR_RETURN(ClusterRunOptions ao,
                     ClusterRunOptions::FromConfig(attempt_config));
    auto summary =
        RunProcessesOnce(attempt_config, ao, run_dir, self_exe, curve, stop,
                         std::exchange(resume_from, nullptr));
    const bool lost =
        !summary.ok() && summary.status().code() == Status::Code::kUnavailable;
    if (!o.restart || !lost || (stop != nullptr && stop->load()) ||
        static_cast<int>(restarts.size()) >= o.max_restarts) {
      if (!restarts.empty()) {
        // The summary (written by the last life's coordinator) says what
        // the restarts cost.
        auto text = ReadFile(run_dir.File("summary.json"));
        nlohmann::json s = text.ok()
                               ? nlohmann::json::parse(*text, nullptr, false)
                               : nlohmann::json();
        if (s.is_object()) {
          s["restarts"] = restarts;
          int64_t lost_steps = 0;
          for (const auto& r : restarts)
            lost_steps += r.value("lost_steps", int64_t{0});
          s["lost_steps"] = lost_steps;
          Status w = run_dir.WriteJson("summary.json", s);
          if (!w.ok()) LogWarning("summary.json: {}", w.message());
        }
        if (summary.ok()) {
          (*summary)["restarts"] = restarts;
        }
      }
      if (lost && o.restart)
        return summary.status().WithContext(
            fmt::format("after {} restart(s) (cluster.max_restarts = {})",
                        restarts.size(), o.max_restarts));
      return summary;
    }
    auto newest = LoadNewestCheckpoint(run_dir.path());
    if (!newest.ok()) {
      LogError("cluster.restart: nothing to restart from: {}",
               newest.status().message());
      return summary.status();
    }
    const int64_t reached = NewestLoggedStep(run_dir);
    nlohmann::json r{
        {"error", summary.status().message()},
        {"steps_logged", reached},
        {"resumed_at_step", newest->step},
        {"lost_steps", std::max<int64_t>(0, reached - newest->step)}};
    restarts.push_back(r);
    LogWarning(
        "cluster.restart: {}; starting every node again from {} (restart {} "
        "of at most {}; about {} steps per worker are trained again)",
        summary.status().message(), newest->dir, restarts.size(),
        o.max_restarts, r["lost_steps"].get<int64_t>());
    RETURN_IF_ERROR(attempt_config.ApplyOverride("checkpoint.resume=true"));
  }
}

}  // namespace strata
