#include "launch/processes.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <thread>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/mutex.h"
#include "common/timeline.h"
#include "coordinator/cluster_checkpoints.h"
#include "coordinator/metrics_endpoint.h"
#include "launch/roles.h"
#include "models/models.h"
#include "transport/factory.h"

extern char** environ;

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The children of one life of a --processes cluster, by node id (a
// replaced node's entry changes), and what starts one. Thread-safe.
class Children {
 public:
  Children(const RoleTable& roles, const RunDirectory& run_dir,
           std::vector<std::string> common_args)
      : roles_(roles), run_dir_(run_dir), args_(std::move(common_args)) {}

  // Starts node `id` (`resume`: it asks the coordinator for its state).
  Status Start(NodeId id, bool resume) EXCLUDES(mu_);
  // Every node but the coordinator; on a failure the ones started are
  // ended.
  Status StartAll(bool resume) EXCLUDES(mu_);
  // cluster.restart in the free modes: a server, worker or evaluator
  // process that died of a signal while the run goes on (until `ended`) is
  // started again.
  void RestartDead(const std::atomic<bool>& ended) EXCLUDES(mu_);
  // Waits (20 s at most) for every child to end; then ends the rest.
  void Reap() EXCLUDES(mu_);

 private:
  Status WritePids() REQUIRES(mu_);

  const RoleTable& roles_;
  const RunDirectory& run_dir_;
  const std::vector<std::string> args_;  // the self path first
  Mutex mu_;
  std::map<NodeId, pid_t> pids_ GUARDED_BY(mu_);
};

Status Children::Start(NodeId id, bool resume) {
  Role role;
  int index;
  RETURN_IF_ERROR(roles_.RoleOf(id, &role, &index));
  std::vector<std::string> args = args_;
  for (const std::string& a :
       {std::string("--role"), std::string(RoleName(role)),
        std::string("--index"), std::to_string(index)})
    args.push_back(a);
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
  const int rc = posix_spawn(&pid, args[0].c_str(), nullptr, nullptr,
                             argv.data(), environ);
  if (rc != 0) {
    return Status::IoError("cannot start {} as a process ({}): {}",
                           roles_.Describe(id), args[0], std::strerror(rc));
  }
  MutexLock lock(&mu_);
  pids_[id] = pid;
  return WritePids();
}

Status Children::WritePids() {
  nlohmann::json pid_map = nlohmann::json::object();
  for (const auto& [id, pid] : pids_) pid_map[roles_.Describe(id)] = pid;
  return run_dir_.WriteJson("pids.json", pid_map);
}

Status Children::StartAll(bool resume) {
  for (NodeId id = 1; id < roles_.num_nodes(); ++id) {
    Status st = Start(id, resume);
    if (st.ok()) continue;
    MutexLock lock(&mu_);
    for (const auto& [other, p] : pids_) ::kill(p, SIGTERM);
    return st;
  }
  return Status::Ok();
}

void Children::RestartDead(const std::atomic<bool>& ended) {
  std::vector<NodeId> restartable = roles_.Ids(Role::kServer);
  for (NodeId id : roles_.Ids(Role::kWorker)) restartable.push_back(id);
  if (roles_.has_evaluator()) restartable.push_back(roles_.EvaluatorId());
  for (NodeId id : restartable) {
    int status = 0;
    pid_t pid;
    {
      MutexLock lock(&mu_);
      pid = pids_[id];
    }
    if (::waitpid(pid, &status, WNOHANG) != pid || !WIFSIGNALED(status) ||
        ended.load())
      continue;
    LogWarning(
        "cluster.restart: {} (pid {}) died of signal {}; starting it again",
        roles_.Describe(id), pid, WTERMSIG(status));
    Status st = Start(id, /*resume=*/true);
    if (!st.ok()) LogError("cluster.restart: {}", st.message());
  }
}

void Children::Reap() {
  std::map<NodeId, pid_t> pids;
  {
    MutexLock lock(&mu_);
    pids = pids_;
  }
  // Children end when the coordinator says stop; any still running after a
  // grace period are ended by PID.
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  for (const auto& [id, pid] : pids) {
    int status = 0;
    while (::waitpid(pid, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
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
}

// One life of a --processes cluster: the coordinator here, every other
// node a child process; the coordinator's summary (the run's error in its
// status) once every child ended, or why the coordinator could not run.
Result<ClusterSummary> RunProcessesOnce(
    const Config& config, const ClusterRunOptions& o,
    const RunDirectory& run_dir, const std::string& self_exe,
    const std::optional<CurveKeys>& curve, const std::atomic<bool>* stop,
    std::shared_ptr<const Checkpoint> resume_from) {
  // Every node on this machine: over UCX with cluster.transport = "ucx",
  // else ZeroMQ TCP.
  ASSIGN_OR_RETURN(const std::string local,
                   LocalEndpoint(o.transport == "ucx" ? "ucx" : "tcp"));
  TransportOptions options;
  options.curve = curve;
  options.links = o.links;
  options.link_seed = o.seed;
  // The coordinator's own spans (the children record theirs, launch/node.cc).
  const timeline::ScopedRecording recording(o.timeline, o.timeline_events);
  RoleContext ctx;
  ASSIGN_OR_RETURN(ctx.transport, NewBoundTransport(0, local, options));
  const std::string endpoint = ctx.transport->endpoint();
  Children children(
      o.roles, run_dir,
      {self_exe, "node", "--coordinator", endpoint, "--run-dir", run_dir.path(),
       "-c", run_dir.File("config.toml"), "--bind", local});
  RETURN_IF_ERROR(children.StartAll(config.GetBool("checkpoint.resume")));
  LogInfo("cluster: {} processes ({}) around the coordinator at {}{}",
          o.roles.num_nodes() - 1, o.roles.ToString(), endpoint,
          curve ? " (CURVE)" : "");
  LogEmulation(config, o.pace);
  // cluster.restart in the free modes: a lost server or worker is started
  // again under its role and index; it re-joins and takes its state from
  // the newest checkpoint.
  std::atomic<bool> ended{false};
  std::thread watcher;
  if (o.restart && !Lockstep(o.mode)) {
    watcher = std::thread([&] {
      while (!ended.load()) {
        std::this_thread::sleep_for(milliseconds(100));
        children.RestartDead(ended);
      }
    });
  }
  ClusterPlan plan;
  plan.options = o;
  std::optional<ClusterSummary> summary;
  ctx.config = &config;
  ctx.plan = &plan;
  ctx.role = Role::kCoordinator;
  ctx.coordinator = endpoint;
  ctx.run_dir = &run_dir;
  ctx.stop = stop;
  ctx.resume_from = std::move(resume_from);
  ctx.summary = &summary;
  Status st = RunRole(ctx);
  ended = true;
  if (watcher.joinable()) watcher.join();
  children.Reap();
  // The coordinator stopped before it wrote a summary.
  if (!summary) return st.ok() ? Status::Internal("no summary") : st;
  return std::move(*summary);
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

// A restart of the whole cluster after `failed`: what it cost, from the
// newest checkpoint and what the workers logged. NotFound without a
// checkpoint to restart from.
// `restart` (from 1) of at most `most`.
Result<ClusterRestart> PlanRestart(const RunDirectory& run_dir,
                                   const Status& failed, size_t restart,
                                   int most) {
  ASSIGN_OR_RETURN(Checkpoint newest,
                   LoadNewestIntactCheckpoint(run_dir.path()));
  ClusterRestart r;
  r.error = failed.message();
  r.steps_logged = NewestLoggedStep(run_dir);
  r.resumed_at_step = newest.step;
  r.lost_steps = std::max<int64_t>(0, r.steps_logged - newest.step);
  LogWarning(
      "cluster.restart: {}; starting every node again from {} (restart {} "
      "of at most {}; about {} steps per worker are trained again)",
      failed.message(), newest.dir, restart, most, r.lost_steps);
  return r;
}

// The summary, written again with what the restarts cost.
void RecordRestarts(const RunDirectory& run_dir, ClusterSummary& summary,
                    const std::vector<ClusterRestart>& restarts) {
  summary.restarts = restarts;
  Status w = run_dir.WriteJson("summary.json", summary.ToJson());
  if (!w.ok()) LogWarning("summary.json: {}", w.message());
}

}  // namespace

Result<ClusterSummary> TrainProcesses(const Config& config,
                                      const RunDirectory& run_dir,
                                      const std::string& self_exe,
                                      const std::atomic<bool>* stop) {
  ASSIGN_OR_RETURN(ClusterRunOptions o, ClusterRunOptions::FromConfig(config));
  RETURN_IF_ERROR(CheckMetricsAddress(o.metrics_address));
  // The nodes run on this machine: a GPU that is not there fails the run
  // here rather than in each worker.
  RETURN_IF_ERROR(CheckDevice(o.device));
  // The first life resumes from the checkpoint checked here; a restarted
  // one reads the newest again.
  ASSIGN_OR_RETURN(std::shared_ptr<const Checkpoint> resume_from,
                   CheckResumable(config, o, run_dir));
  // Checked here, before any child starts, so a bad key is reported once.
  ASSIGN_OR_RETURN(const std::optional<CurveKeys> curve,
                   CurveKeysFromConfig(config));
  // cluster.ucx_shared_memory: the children (and the coordinator's own
  // transport) take it from the environment (UcxOptions::shared_memory).
  setenv("STRATA_UCX_SHARED_MEMORY",
         UcxSharedMemoryEnvValue(o.ucx_shared_memory), 1);
  // Several processes share the cores: one BLAS thread each.
  setenv("OPENBLAS_NUM_THREADS", "1", 0);
  Config life = config;
  std::vector<ClusterRestart> restarts;
  // The last life's summary (the one summary.json holds).
  ClusterSummary last;
  while (true) {
    ASSIGN_OR_RETURN(ClusterRunOptions lo, ClusterRunOptions::FromConfig(life));
    Result<ClusterSummary> life_summary =
        RunProcessesOnce(life, lo, run_dir, self_exe, curve, stop,
                         std::exchange(resume_from, nullptr));
    if (!life_summary.ok()) {
      // This life's coordinator wrote no summary: the last one says what
      // the restarts so far cost.
      if (!restarts.empty()) RecordRestarts(run_dir, last, restarts);
      return life_summary.status();
    }
    last = std::move(life_summary).value();
    const bool lost = last.status.code() == Status::Code::kUnavailable;
    if (o.restart && lost && !(stop != nullptr && stop->load()) &&
        static_cast<int>(restarts.size()) < o.max_restarts) {
      Result<ClusterRestart> r = PlanRestart(
          run_dir, last.status, restarts.size() + 1, o.max_restarts);
      if (!r.ok()) {
        LogError("cluster.restart: nothing to restart from: {}",
                 r.status().message());
        return last.status;
      }
      restarts.push_back(*r);
      RETURN_IF_ERROR(life.ApplyOverride("checkpoint.resume=true"));
      continue;
    }
    if (!restarts.empty()) RecordRestarts(run_dir, last, restarts);
    if (lost && o.restart) {
      return last.status.WithContext(
          fmt::format("after {} restart(s) (cluster.max_restarts = {})",
                      restarts.size(), o.max_restarts));
    }
    if (!last.status.ok()) return last.status;
    return last;
  }
}

}  // namespace strata
