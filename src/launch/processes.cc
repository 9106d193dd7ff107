#include "launch/processes.h"

#include <arpa/inet.h>
#include <fcntl.h>
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
#include <thread>
#include <utility>
#include <vector>

#include "common/fs.h"
#include "common/log.h"
#include "common/mutex.h"
#include "common/timeline.h"
#include "coordinator/cluster_checkpoints.h"
#include "coordinator/metrics_endpoint.h"
#include "coordinator/resize_restore.h"
#include "launch/join.h"
#include "launch/life_channel.h"
#include "launch/node.h"
#include "launch/roles.h"
#include "launch/scale.h"
#include "models/models.h"
#include "run/scale_request.h"
#include "transport/factory.h"

extern char** environ;

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How long a scale waits, from the end of a life, for a worker on another
// machine to ask for its next one (it asks every 100 ms once its life's
// roles are down).
constexpr std::chrono::seconds kRemoteLifeWait(10);

// The children of a --processes cluster, by node id, with each one's
// channel for its next life (launch/life_channel.h), and what starts one. A
// child lives as long as its role does in every life: a scale (Reform) keeps
// the nodes the new role table still has. Thread-safe. The destructor ends
// every child (EndAll).
class Children {
 public:
  explicit Children(const RunDirectory& run_dir,
                    std::vector<std::string> common_args)
      : run_dir_(run_dir), args_(std::move(common_args)) {}
  ~Children() { EndAll(); }
  Children(const Children&) = delete;
  Children& operator=(const Children&) = delete;

  // A life of `roles` around the coordinator at `coordinator`: every node
  // but the coordinator started (`resume`: it asks the coordinator for its
  // state); on a failure the ones started are ended.
  Status StartAll(const RoleTable& roles, const std::string& coordinator,
                  bool resume) EXCLUDES(mu_);
  // A scale to `roles`: the running nodes it still has run their role again
  // in their processes (`life`); those it has not are told to end (reaped
  // by EndAll); the new ones start (resuming). A kept node that died
  // meanwhile is started again. Returns the membership.jsonl line: the PIDs
  // kept, started and ended.
  // `kept_workers`: the old index of each worker that goes on, in its new
  // order (a drain renumbers the ones after it).
  Result<nlohmann::json> Reform(const RoleTable& roles, NextLife life,
                                const std::vector<int>& kept_workers)
      EXCLUDES(mu_);
  // cluster.restart in the free modes: a server, worker or evaluator
  // process that died of a signal while the run goes on (until `ended`) is
  // started again.
  // `workers`: false with cluster.leave_on_loss (a lost worker leaves).
  void RestartDead(const std::atomic<bool>& ended, bool workers) EXCLUDES(mu_);
  // Tells every child the run is over (closes its channel), waits (20 s at
  // most) for each to end, then ends the rest by PID.
  void EndAll() EXCLUDES(mu_);
  // Workers started by hand that asked to join (launch/join.h): a scale
  // gives them new workers' slots before starting processes. May be null.
  void set_joins(JoinListener* joins) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    joins_ = joins;
  }

 private:
  struct Child {
    pid_t pid = -1;
    int life_fd = -1;  // the launcher's end of its channel
    // A worker on another machine (joined through the control endpoint):
    // its channel instead; no PID here.
    std::shared_ptr<RemoteLife> remote;
  };

  // The child's next life; IoError when its channel is gone. A remote
  // child gets the run's config with it.
  Status Tell(const Child& kid, NextLife life) const;
  // The end of the run for the child: its channel closes.
  static void Hang(Child& kid);
  // Whether the child's process is known to have ended (never for a
  // remote one: the coordinator's heartbeats tell).
  static bool Gone(const Child& kid);
  // A worker on another machine that does not poll for its next life by
  // `until` (RemoteLife::AwaitPoll): it died between lives. Logs it.
  static bool RemoteDiedBetweenLives(const Child& kid, Clock::time_point until);

  Status Start(NodeId id, bool resume) REQUIRES(mu_);
  // Node `id` (a worker's slot) given to a process that joined, with its
  // first life; false when none waits. Not the launcher's child: it is
  // never restarted, and ends when its channel closes.
  bool Adopt(NodeId id, NextLife life) REQUIRES(mu_);
  Status WritePids() REQUIRES(mu_);

  const RunDirectory& run_dir_;
  const std::vector<std::string> args_;  // the self path first
  Mutex mu_;
  RoleTable roles_ GUARDED_BY(mu_);
  std::string coordinator_ GUARDED_BY(mu_);
  std::map<NodeId, Child> kids_ GUARDED_BY(mu_);
  // Nodes a scale left out, told to end; reaped at the end (EndAll), so a
  // slow exit does not hold up the next life.
  std::vector<pid_t> leavers_ GUARDED_BY(mu_);
  JoinListener* joins_ GUARDED_BY(mu_) = nullptr;
};

// The channel a child reads its next life from: one end at kLifeFd in the
// child, the other (close-on-exec, so no other child holds it) here. A
// socket pair rather than a pipe: a word to a child that died meanwhile
// fails with EPIPE instead of raising SIGPIPE in the launcher.
Status SpawnWithPipe(const std::vector<std::string>& args, pid_t* pid,
                     int* write_fd) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
    return Status::IoError("a channel for a node: {}", std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[0], kLifeFd);
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int rc = posix_spawn(pid, copy[0].c_str(), &actions, nullptr,
                             argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[0]);
  if (rc != 0) {
    ::close(fds[1]);
    return Status::IoError("{}", std::strerror(rc));
  }
  *write_fd = fds[1];
  return Status::Ok();
}

Status Children::Start(NodeId id, bool resume) {
  Role role;
  int index;
  RETURN_IF_ERROR(roles_.RoleOf(id, &role, &index));
  std::vector<std::string> args = args_;
  for (const std::string& a :
       {std::string("--coordinator"), coordinator_, std::string("--role"),
        std::string(RoleName(role)), std::string("--index"),
        std::to_string(index), std::string("--life-fd"),
        std::to_string(kLifeFd)})
    args.push_back(a);
  // A resumed run (or a replacement): the node asks the coordinator for
  // its state.
  if (resume) {
    args.push_back("--set");
    args.push_back("checkpoint.resume=true");
  }
  Child kid;
  Status st = SpawnWithPipe(args, &kid.pid, &kid.life_fd);
  if (!st.ok())
    return Status::IoError("cannot start {} as a process ({}): {}",
                           roles_.Describe(id), args[0], st.message());
  // A replaced node's old channel (its process died).
  auto old = kids_.find(id);
  if (old != kids_.end()) Hang(old->second);
  kids_[id] = kid;
  return WritePids();
}

Status Children::WritePids() {
  nlohmann::json pid_map = nlohmann::json::object();
  for (const auto& [id, kid] : kids_)
    if (!kid.remote) pid_map[roles_.Describe(id)] = kid.pid;
  return run_dir_.WriteJson("pids.json", pid_map);
}

Status Children::StartAll(const RoleTable& roles,
                          const std::string& coordinator, bool resume) {
  MutexLock lock(&mu_);
  roles_ = roles;
  coordinator_ = coordinator;
  for (NodeId id = 1; id < roles_.num_nodes(); ++id) {
    Status st = Start(id, resume);
    if (st.ok()) continue;
    for (const auto& [other, kid] : kids_)
      if (!kid.remote) ::kill(kid.pid, SIGTERM);
    return st;
  }
  return Status::Ok();
}

// Waits (20 s at most) for `pids` to end; then ends the rest by PID.
void ReapPids(const std::vector<pid_t>& pids) {
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  for (pid_t pid : pids) {
    if (pid <= 0) continue;  // never waitpid(-1) or kill(-1)
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

// Node `index` of `role` after a scale: the same, but a worker takes its
// place among `kept_workers` (-1: it leaves).
int IndexAfterScale(Role role, int index,
                    const std::vector<int>& kept_workers) {
  if (role != Role::kWorker) return index;
  auto it = std::find(kept_workers.begin(), kept_workers.end(), index);
  return it == kept_workers.end() ? -1
                                  : static_cast<int>(it - kept_workers.begin());
}

Result<nlohmann::json> Children::Reform(const RoleTable& roles, NextLife life,
                                        const std::vector<int>& kept_workers) {
  MutexLock lock(&mu_);
  std::map<NodeId, Child> kept;
  std::vector<pid_t> leaving, kept_pids;
  int kept_remote = 0;  // workers on other machines (no PID here)
  nlohmann::json gone_remote = nlohmann::json::array();
  const Clock::time_point polls_by = Clock::now() + kRemoteLifeWait;
  for (const auto& [id, kid] : kids_) {
    Role role;
    int index = -1;
    if (roles_.RoleOf(id, &role, &index).ok())
      index = IndexAfterScale(role, index, kept_workers);
    const NodeId next = index >= 0 ? roles.IdOf(role, index) : kInvalidNodeId;
    life.index = index;
    bool gone = Gone(kid);
    if (next != kInvalidNodeId && !gone &&
        RemoteDiedBetweenLives(kid, polls_by)) {
      gone = true;
      gone_remote.push_back(
          {{"host", kid.remote->host()}, {"pid", kid.remote->pid()}});
    }
    if (next != kInvalidNodeId && !gone && Tell(kid, life).ok()) {
      kept[next] = kid;
      if (kid.remote) {
        ++kept_remote;
      } else {
        kept_pids.push_back(kid.pid);
      }
      continue;
    }
    Child left = kid;
    Hang(left);  // the end of the run for it
    if (!gone && !kid.remote) leaving.push_back(kid.pid);
  }
  roles_ = roles;
  coordinator_ = life.coordinator;
  kids_ = std::move(kept);
  std::vector<pid_t> started, joined;
  nlohmann::json remote = nlohmann::json::array();
  for (NodeId id = 1; id < roles_.num_nodes(); ++id) {
    if (kids_.count(id) > 0) continue;
    if (Adopt(id, life)) {
      const Child& kid = kids_[id];
      if (kid.remote) {
        remote.push_back({{"host", kid.remote->host()},
                          {"pid", kid.remote->pid()},
                          {"node", roles_.Describe(id)}});
      } else {
        joined.push_back(kid.pid);
      }
      continue;
    }
    RETURN_IF_ERROR(Start(id, /*resume=*/true));
    started.push_back(kids_[id].pid);
  }
  RETURN_IF_ERROR(WritePids());
  leavers_.insert(leavers_.end(), leaving.begin(), leaving.end());
  return nlohmann::json{
      {"event", "processes"},       {"kept_pids", kept_pids},
      {"started_pids", started},    {"joined_pids", joined},
      {"joined_remote", remote},    {"kept_remote", kept_remote},
      {"gone_remote", gone_remote}, {"ended_pids", leaving}};
}

Status Children::Tell(const Child& kid, NextLife life) const {
  if (!kid.remote) return SendNextLife(kid.life_fd, life);
  ASSIGN_OR_RETURN(life.config, ReadFile(run_dir_.File("config.toml")));
  kid.remote->Send(life.ToLine());
  return Status::Ok();
}

void Children::Hang(Child& kid) {
  if (kid.remote) kid.remote->Close();
  if (kid.life_fd >= 0) ::close(kid.life_fd);
  kid.life_fd = -1;
}

bool Children::RemoteDiedBetweenLives(const Child& kid,
                                      Clock::time_point until) {
  if (!kid.remote || kid.remote->AwaitPoll(1.0, until)) return false;
  LogWarning(
      "the worker on {} (pid {} there) did not ask for its next life within "
      "{} s of the last one's end: it is gone, and its slot is given to "
      "another",
      kid.remote->host(), kid.remote->pid(),
      std::chrono::duration_cast<std::chrono::seconds>(kRemoteLifeWait)
          .count());
  return true;
}

bool Children::Gone(const Child& kid) {
  int status = 0;
  return !kid.remote && kid.pid > 0 &&
         ::waitpid(kid.pid, &status, WNOHANG) == kid.pid;
}

bool Children::Adopt(NodeId id, NextLife life) {
  Role role;
  if (joins_ == nullptr || !roles_.RoleOf(id, &role, &life.index).ok() ||
      role != Role::kWorker)
    return false;
  while (std::optional<Joiner> j = joins_->Take()) {
    Child kid{j->pid, j->fd, j->remote};
    // A remote joiner polls every 100 ms while it waits: one silent for
    // seconds gave up or died (a local one's channel says so: EPIPE).
    if (kid.remote && kid.remote->silent_s() > 3) {
      LogWarning("the worker on {} (pid {} there) that joined is gone",
                 kid.remote->host(), kid.remote->pid());
      Hang(kid);
      continue;
    }
    if (Tell(kid, life).ok()) {
      if (kid.remote) {
        LogInfo("{} is the worker on {} (pid {} there) that joined",
                roles_.Describe(id), kid.remote->host(), kid.remote->pid());
      } else {
        LogInfo("{} is the process (pid {}) that joined by hand",
                roles_.Describe(id), j->pid);
      }
      kids_[id] = kid;
      return true;
    }
    Hang(kid);  // it left meanwhile
  }
  return false;
}

void Children::RestartDead(const std::atomic<bool>& ended, bool workers) {
  MutexLock lock(&mu_);
  std::vector<NodeId> restartable = roles_.Ids(Role::kServer);
  for (NodeId id : roles_.Ids(Role::kData)) restartable.push_back(id);
  if (workers)
    for (NodeId id : roles_.Ids(Role::kWorker)) restartable.push_back(id);
  if (roles_.has_evaluator()) restartable.push_back(roles_.EvaluatorId());
  for (NodeId id : restartable) {
    int status = 0;
    auto kid = kids_.find(id);
    // Not this machine's to start (a remote worker), or none.
    if (kid == kids_.end() || kid->second.remote || kid->second.pid <= 0)
      continue;
    const pid_t pid = kid->second.pid;
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

void Children::EndAll() {
  std::vector<pid_t> pids;
  std::vector<std::shared_ptr<RemoteLife>> remote;
  {
    MutexLock lock(&mu_);
    // Children end when the coordinator says stop and their channel closes;
    // any still running after a grace period are ended by PID.
    for (auto& [id, kid] : kids_) {
      Hang(kid);
      if (kid.remote) {
        remote.push_back(kid.remote);
      } else {
        pids.push_back(kid.pid);
      }
    }
    kids_.clear();
    pids.insert(pids.end(), leavers_.begin(), leavers_.end());
    leavers_.clear();
  }
  ReapPids(pids);
  // Workers on other machines poll for the end: up to 3 s for them to take
  // it before the endpoint goes (they also end when it stops answering).
  const auto deadline = Clock::now() + std::chrono::seconds(3);
  for (const auto& r : remote)
    while (!r->Ended() && Clock::now() < deadline)
      std::this_thread::sleep_for(milliseconds(20));
}

// How a life's children start: all of them, or (a scale) by keeping the
// running ones the new size still has.
struct LifeStart {
  bool keep_running = false;
  std::vector<int> kept_workers;  // a scale: Children::Reform's
};

// Gossip and tree-easgd: a lost worker is not started again. Its
// replacement would restore the newest checkpoint's model and gossip weight
// while its peers kept what its predecessor sent them since: the weight it
// gave away would count twice. The run goes on without it.
bool PeersGiveModels(RunMode mode) {
  return mode == RunMode::kGossip || mode == RunMode::kTreeEasgd;
}

// Starts the children of a life around the coordinator at `endpoint`.
Status StartChildren(Children& children, const Config& config,
                     const ClusterRunOptions& o, const RunDirectory& run_dir,
                     const std::string& endpoint, const LifeStart& how) {
  if (!how.keep_running)
    return children.StartAll(o.roles, endpoint,
                             config.GetBool("checkpoint.resume"));
  ASSIGN_OR_RETURN(
      nlohmann::json line,
      children.Reform(o.roles,
                      NextLife{endpoint, {"checkpoint.resume=true"}, -1, ""},
                      how.kept_workers));
  LogInfo("scaled: {} processes kept (the same PIDs), {} started, {} ended",
          line["kept_pids"].size(), line["started_pids"].size(),
          line["ended_pids"].size());
  Status st = AppendMembership(run_dir.path(), line);
  if (!st.ok()) LogWarning("membership.jsonl: {}", st.message());
  return Status::Ok();
}

// One life of a --processes cluster: the coordinator here, every other
// node a child process; the coordinator's summary (the run's error in its
// status) once it finished, or why the coordinator could not run. The
// children are left to the caller (a scale keeps some for the next life).
Result<ClusterSummary> RunProcessesOnce(
    const Config& config, const ClusterRunOptions& o,
    const RunDirectory& run_dir, const std::string& local,
    const std::optional<CurveKeys>& curve, const std::atomic<bool>* stop,
    std::shared_ptr<const Checkpoint> resume_from, Children& children,
    const LifeStart& how) {
  TransportOptions options;
  options.curve = curve;
  options.links = o.links;
  options.link_seed = o.seed;
  // The coordinator's own spans (the children record theirs, launch/node.cc).
  const timeline::ScopedRecording recording(o.timeline, o.timeline_events);
  RoleContext ctx;
  ASSIGN_OR_RETURN(ctx.transport, NewBoundTransport(0, local, options));
  const std::string endpoint = ctx.transport->endpoint();
  RETURN_IF_ERROR(StartChildren(children, config, o, run_dir, endpoint, how));
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
        children.RestartDead(
            ended, /*workers=*/!o.leave_on_loss && !PeersGiveModels(o.mode));
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

// `strata scale`: the coordinator stopped the run at a checkpoint for an
// accepted request. True when the next life takes it: `life` on the new
// worker count, `resume_from` its checkpoint (the run's config.toml is
// rewritten for it, so the kept nodes read the new count), `how` the
// running nodes it keeps.
Result<bool> NextScaledLife(const RunDirectory& run_dir,
                            const std::atomic<bool>* stop, Config* life,
                            std::shared_ptr<const Checkpoint>* resume_from,
                            LifeStart* how) {
  const int from = static_cast<int>(life->GetInt("cluster.workers"));
  ASSIGN_OR_RETURN(std::optional<ScaleRequest> scale,
                   TakeScale(run_dir.path(), stop, life));
  if (!scale) return false;
  ASSIGN_OR_RETURN(ClusterRunOptions o, ClusterRunOptions::FromConfig(*life));
  ASSIGN_OR_RETURN(*resume_from, CheckResumable(*life, o, run_dir));
  how->keep_running = true;
  ASSIGN_OR_RETURN(how->kept_workers,
                   ResumeWorkers(life->GetString("checkpoint.resume_workers"),
                                 from, scale->workers));
  return true;
}

// The summary, written again with what the restarts cost.
void RecordRestarts(const RunDirectory& run_dir, ClusterSummary& summary,
                    const std::vector<ClusterRestart>& restarts) {
  summary.restarts = restarts;
  Status w = run_dir.WriteJson("summary.json", summary.ToJson());
  if (!w.ok()) LogWarning("summary.json: {}", w.message());
}

// The environment every child inherits, and the endpoint the nodes bind
// on this machine: cluster.processes_ip (loopback unless workers on other
// machines are to reach them).
Result<std::string> PrepareLocalNodes(const Config& config,
                                      const ClusterRunOptions& o) {
  // cluster.ucx_shared_memory: the children (and the coordinator's own
  // transport) take it from the environment (UcxOptions::shared_memory).
  setenv("STRATA_UCX_SHARED_MEMORY",
         UcxSharedMemoryEnvValue(o.ucx_shared_memory), 1);
  // Several processes share the cores: one BLAS thread each.
  setenv("OPENBLAS_NUM_THREADS", "1", 0);
  // Every node on this machine: over UCX with cluster.transport = "ucx",
  // else ZeroMQ TCP.
  const std::string kind = o.transport == "ucx" ? "ucx" : "tcp";
  const std::string& ip = config.GetString("cluster.processes_ip");
  in_addr probe{};
  if (::inet_pton(AF_INET, ip.c_str(), &probe) != 1 || ip == "0.0.0.0")
    return Status::InvalidArgument(
        "cluster.processes_ip '{}' is not an IPv4 address of this machine "
        "(where the other nodes reach it; not a wildcard)",
        ip);
  return kind + "://" + ip + ":*";
}

}  // namespace

Result<ClusterSummary> TrainProcesses(const Config& config,
                                      const RunDirectory& run_dir,
                                      const std::string& self_exe,
                                      const std::atomic<bool>* stop,
                                      JoinListener* joins) {
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
  // A worker's data and plan, as each worker node would make them: bad data
  // or a model that does not fit it fails here, at once, with its reason.
  RETURN_IF_ERROR(CheckWorkerInputs(config));
  ASSIGN_OR_RETURN(const std::string local, PrepareLocalNodes(config, o));
  Children children(run_dir,
                    {self_exe, "node", "--run-dir", run_dir.path(), "-c",
                     run_dir.File("config.toml"), "--bind", local});
  children.set_joins(joins);
  Config life = config;
  LifeStart how;
  std::vector<ClusterRestart> restarts;
  // The last life's summary (the one summary.json holds).
  ClusterSummary last;
  while (true) {
    ASSIGN_OR_RETURN(ClusterRunOptions lo, ClusterRunOptions::FromConfig(life));
    Result<ClusterSummary> life_summary =
        RunProcessesOnce(life, lo, run_dir, local, curve, stop,
                         std::exchange(resume_from, nullptr), children, how);
    if (!life_summary.ok()) {
      // This life's coordinator wrote no summary: the last one says what
      // the restarts so far cost.
      if (!restarts.empty()) RecordRestarts(run_dir, last, restarts);
      return life_summary.status();
    }
    last = std::move(life_summary).value();
    ASSIGN_OR_RETURN(bool scaled,
                     NextScaledLife(run_dir, stop, &life, &resume_from, &how));
    if (scaled) continue;
    children.EndAll();
    how = LifeStart{};
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
