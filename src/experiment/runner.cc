#include "experiment/runner.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/fs.h"
#include "common/log.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

bool IsDir(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Whether the run directory's resolved config is the one the plan asks for
// (an experiment file edited between two passes must not mix settings).
bool ConfigMatches(const std::string& dir, const Config& expected) {
  auto got = Config::FromTomlFile(JoinPath(dir, "config.toml"));
  return got.ok() && got->ToToml() == expected.ToToml();
}

Result<Config> ExpectedConfig(const ExperimentSpec& spec, const PlannedRun& run,
                              const RunnerOptions& o) {
  ASSIGN_OR_RETURN(Config c, spec.CellConfig(run.cell));
  RETURN_IF_ERROR(c.SetFromString("run.dir", JoinPath(o.output, "runs")));
  RETURN_IF_ERROR(c.SetFromString("run.name", run.name));
  RETURN_IF_ERROR(c.Set("run.seed", run.seed));
  return c;
}

// Moves a partial or outdated run directory out of the way, so the new run
// gets its name (RunDirectory::Create would otherwise pick "<name>-2").
Status MoveAside(const std::string& dir, const std::string& output,
                 const std::string& name) {
  const std::string stale = JoinPath(output, "stale");
  RETURN_IF_ERROR(MakeDirs(stale));
  for (int k = 1; k < 100000; ++k) {
    std::string to = JoinPath(stale, name + "-" + std::to_string(k));
    if (FileExists(to) || IsDir(to)) continue;
    if (::rename(dir.c_str(), to.c_str()) != 0) {
      return Status::IoError("cannot move '{}' to '{}': {}", dir, to,
                             std::strerror(errno));
    }
    LogInfo("moved the unfinished run '{}' to '{}'; running it again", dir, to);
    return Status::Ok();
  }
  return Status::IoError("too many stale copies of '{}'", dir);
}

struct Child {
  size_t index = 0;  // into the plan
  pid_t pid = -1;
  Clock::time_point start;
  bool signalled = false;  // SIGINT sent (stop or timeout)
  Clock::time_point signalled_at;
  bool killed = false;
  bool timed_out = false;
};

Result<pid_t> Spawn(const std::vector<std::string>& args,
                    const std::string& log_path) {
  std::vector<char*> argv;
  for (const std::string& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const int log_fd =
      ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    return Status::IoError("cannot open log file '{}': {}", log_path,
                           std::strerror(errno));
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(log_fd);
    return Status::IoError("fork failed: {}", std::strerror(errno));
  }
  if (pid == 0) {
    // Only async-signal-safe calls between fork and exec.
    // Own process group: a terminal's Ctrl-C reaches the experiment only,
    // which then sends each child exactly one SIGINT (a second one would
    // end it at once, without its summary).
    ::setpgid(0, 0);
    // If the experiment dies, the child stops cleanly too.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(127);
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    const int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, 0);
    ::execv(argv[0], argv.data());
    const char msg[] = "strata experiment: cannot execute the strata binary\n";
    (void)!::write(2, msg, sizeof(msg) - 1);
    ::_exit(127);
  }
  ::close(log_fd);
  // Also here, so that the group exists before the first signal to it.
  ::setpgid(pid, pid);
  return pid;
}

// Signals the child's process group (the child and anything it started, as
// a terminal's Ctrl-C would), or the child alone if the group is gone.
void SignalRun(pid_t pid, int sig) {
  if (::kill(-pid, sig) != 0) ::kill(pid, sig);
}

}  // namespace

RunDirState InspectRunDir(const std::string& dir) {
  if (!IsDir(dir)) return RunDirState::kMissing;
  auto text = ReadFile(JoinPath(dir, "summary.json"));
  if (!text.ok()) return RunDirState::kPartial;
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return RunDirState::kPartial;
  if (!j.contains("interrupted") || !j["interrupted"].is_boolean() ||
      j["interrupted"].get<bool>() || j.contains("error"))
    return RunDirState::kPartial;
  return RunDirState::kComplete;
}

std::string FormatDuration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t t = static_cast<int64_t>(std::llround(s));
  if (t >= 3600) return fmt::format("{}h{:02d}m", t / 3600, (t % 3600) / 60);
  if (t >= 60) return fmt::format("{}m{:02d}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

std::vector<std::string> RunCommand(const ExperimentSpec& spec,
                                    const PlannedRun& run,
                                    const RunnerOptions& o) {
  std::vector<std::string> args = {o.exe, "train", "-c", o.base_config};
  for (const auto& [key, value] : spec.cells[run.cell].overrides) {
    args.push_back("--set");
    args.push_back(key + "=" + value);
  }
  for (const std::string& s :
       {"run.dir=" + JoinPath(o.output, "runs"), "run.name=" + run.name,
        "run.seed=" + std::to_string(run.seed)}) {
    args.push_back("--set");
    args.push_back(s);
  }
  return args;
}

namespace {

// Resume: marks every complete run with the planned config "skipped", moves
// partial or outdated run directories aside, and returns the plan indices
// still to run. `out` holds one outcome per planned run.
Result<std::vector<size_t>> RunsToDo(const ExperimentSpec& spec,
                                     const RunnerOptions& o,
                                     const std::string& runs_dir,
                                     std::vector<RunOutcome>* out) {
  std::vector<size_t> todo;
  for (size_t i = 0; i < spec.runs.size(); ++i) {
    const PlannedRun& run = spec.runs[i];
    (*out)[i].name = run.name;
    const std::string dir = JoinPath(runs_dir, run.name);
    ASSIGN_OR_RETURN(Config expected, ExpectedConfig(spec, run, o));
    const RunDirState state = InspectRunDir(dir);
    if (state == RunDirState::kComplete && ConfigMatches(dir, expected)) {
      (*out)[i].state = "skipped";
      (*out)[i].log = JoinPath(dir, "train.log");
      continue;
    }
    if (state != RunDirState::kMissing) {
      if (state == RunDirState::kComplete) {
        LogWarning(
            "run '{}' was made with other settings than the experiment "
            "file now asks for",
            run.name);
      }
      RETURN_IF_ERROR(MoveAside(dir, o.output, run.name));
    }
    todo.push_back(i);
  }
  return todo;
}

// One pass over the runs still to do: starts up to `parallel` children,
// polls them every 100 ms, enforces timeouts and the stop grace period, and
// records each outcome. Used by one thread.
class ExperimentPass {
 public:
  ExperimentPass(const ExperimentSpec& spec, const RunnerOptions& o,
                 std::string runs_dir, std::string logs_dir,
                 std::vector<RunOutcome>* out)
      : spec_(spec),
        o_(o),
        runs_dir_(std::move(runs_dir)),
        logs_dir_(std::move(logs_dir)),
        out_(*out) {}

  // Runs `todo` (plan indices) to the end, or until *stop and every child
  // has ended. An error only when a child cannot be started (the children
  // running then get a SIGINT).
  Status Run(const std::vector<size_t>& todo);

 private:
  size_t CellsDone() const;
  size_t RunsEnded() const;
  void Progress(const std::string& event) const;
  // After *stop: one SIGINT to every child not signalled yet.
  void StopAll();
  // Starts children from todo[*next] on while there is room.
  Status StartRuns(const std::vector<size_t>& todo, size_t* next);
  // Reaps the children that ended; signals those over their time.
  void Poll();
  void EnforceLimits(Child& c);
  // Records the outcome of a child that ended (waitpid returned `r`).
  void Finish(const Child& c, pid_t r, int status);

  const ExperimentSpec& spec_;
  const RunnerOptions& o_;
  const std::string runs_dir_;
  const std::string logs_dir_;
  std::vector<RunOutcome>& out_;
  std::vector<Child> running_;
  size_t skipped_ = 0;
  Clock::time_point t0_ = Clock::now();
  size_t finished_now_ = 0;
  double finished_seconds_ = 0;
};

size_t ExperimentPass::CellsDone() const {
  size_t n = 0;
  for (size_t c = 0; c < spec_.cells.size(); ++c) {
    bool all = true;
    for (size_t i = 0; i < out_.size(); ++i) {
      if (spec_.runs[i].cell == static_cast<int>(c))
        all = all && (out_[i].state == "done" || out_[i].state == "skipped");
    }
    n += all ? 1 : 0;
  }
  return n;
}

size_t ExperimentPass::RunsEnded() const {
  size_t n = 0;
  for (const auto& r : out_) n += r.state != "pending" ? 1 : 0;
  return n;
}

void ExperimentPass::Progress(const std::string& event) const {
  if (!o_.print_progress) return;
  const size_t total = out_.size();
  const size_t left = total - RunsEnded();
  std::string eta = "?";
  if (left == 0) {
    eta = "0s";
  } else if (finished_now_ > 0) {
    const double per_run =
        finished_seconds_ / static_cast<double>(finished_now_);
    eta = FormatDuration(per_run * static_cast<double>(left) /
                         std::max(1, o_.parallel));
  }
  std::printf(
      "[experiment] %s | cells %zu/%zu | runs %zu/%zu (%zu skipped, %zu "
      "running) | elapsed %s | ETA %s\n",
      event.c_str(), CellsDone(), spec_.cells.size(), RunsEnded(), total,
      skipped_, running_.size(), FormatDuration(SecondsSince(t0_)).c_str(),
      eta.c_str());
  std::fflush(stdout);
}

void ExperimentPass::StopAll() {
  std::printf(
      "[experiment] interrupted: stopping %zu running run(s); run the "
      "same command again to resume\n",
      running_.size());
  std::fflush(stdout);
  for (Child& c : running_) {
    if (!c.signalled) {
      SignalRun(c.pid, SIGINT);
      c.signalled = true;
      c.signalled_at = Clock::now();
    }
  }
}

Status ExperimentPass::StartRuns(const std::vector<size_t>& todo,
                                 size_t* next) {
  while (*next < todo.size() &&
         static_cast<int>(running_.size()) < std::max(1, o_.parallel)) {
    const size_t i = todo[(*next)++];
    const PlannedRun& run = spec_.runs[i];
    const std::string log = JoinPath(logs_dir_, run.name + ".log");
    auto pid = Spawn(RunCommand(spec_, run, o_), log);
    if (!pid.ok()) {
      for (Child& c : running_) SignalRun(c.pid, SIGINT);
      return pid.status();
    }
    Child c;
    c.index = i;
    c.pid = *pid;
    c.start = Clock::now();
    running_.push_back(c);
    out_[i].log = log;
    Progress("started " + run.name);
  }
  return Status::Ok();
}

void ExperimentPass::EnforceLimits(Child& c) {
  if (!c.signalled && SecondsSince(c.start) > o_.run_timeout_s) {
    LogWarning("run '{}' exceeded run_timeout_s = {}; stopping it",
               spec_.runs[c.index].name, o_.run_timeout_s);
    SignalRun(c.pid, SIGINT);
    c.signalled = true;
    c.timed_out = true;
    c.signalled_at = Clock::now();
  } else if (c.signalled && !c.killed &&
             SecondsSince(c.signalled_at) > o_.stop_grace_s) {
    LogWarning("run '{}' did not stop within {} s; killing it",
               spec_.runs[c.index].name, o_.stop_grace_s);
    SignalRun(c.pid, SIGKILL);
    c.killed = true;
  }
}

void ExperimentPass::Finish(const Child& c, pid_t r, int status) {
  RunOutcome& res = out_[c.index];
  const PlannedRun& run = spec_.runs[c.index];
  res.seconds = SecondsSince(c.start);
  res.exit_code = r < 0               ? -1
                  : WIFEXITED(status) ? WEXITSTATUS(status)
                                      : 128 + WTERMSIG(status);
  const std::string dir = JoinPath(runs_dir_, run.name);
  const RunDirState state = InspectRunDir(dir);
  if (c.timed_out) {
    res.state = "timeout";
  } else if (res.exit_code == 0 && state == RunDirState::kComplete) {
    res.state = "done";
    finished_now_ += 1;
    finished_seconds_ += res.seconds;
  } else if (c.signalled || res.exit_code == 130) {
    res.state = "interrupted";
  } else {
    res.state = "failed";
  }
  // Keep the log with the run it belongs to.
  if (IsDir(dir)) {
    const std::string moved = JoinPath(dir, "train.log");
    if (::rename(res.log.c_str(), moved.c_str()) == 0) res.log = moved;
  }
  if (res.state != "done" && res.state != "interrupted") {
    LogWarning("run '{}' {} (exit code {}); its output is in {}", run.name,
               res.state, res.exit_code, res.log);
  }
}

void ExperimentPass::Poll() {
  for (size_t k = 0; k < running_.size();) {
    Child& c = running_[k];
    int status = 0;
    const pid_t r = ::waitpid(c.pid, &status, WNOHANG);
    if (r == 0) {  // still running
      EnforceLimits(c);
      ++k;
      continue;
    }
    Finish(c, r, status);
    const RunOutcome& res = out_[c.index];
    const std::string event =
        fmt::format("{} {} ({})", res.state, spec_.runs[c.index].name,
                    FormatDuration(res.seconds));
    running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(k));
    Progress(event);
  }
}

Status ExperimentPass::Run(const std::vector<size_t>& todo) {
  skipped_ = out_.size() - todo.size();
  t0_ = Clock::now();
  if (o_.print_progress && skipped_ > 0)
    Progress(fmt::format("resuming: {} finished run(s) kept", skipped_));
  size_t next = 0;
  bool stopping = false;
  while ((next < todo.size() && !stopping) || !running_.empty()) {
    if (o_.stop != nullptr && o_.stop->load() && !stopping) {
      stopping = true;
      StopAll();
    }
    if (!stopping) RETURN_IF_ERROR(StartRuns(todo, &next));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    Poll();
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<RunOutcome>> RunPlannedRuns(const ExperimentSpec& spec,
                                               const RunnerOptions& o) {
  const std::string runs_dir = JoinPath(o.output, "runs");
  const std::string logs_dir = JoinPath(o.output, "logs");
  RETURN_IF_ERROR(MakeDirs(runs_dir));
  RETURN_IF_ERROR(MakeDirs(logs_dir));
  std::vector<RunOutcome> out(spec.runs.size());
  ASSIGN_OR_RETURN(std::vector<size_t> todo, RunsToDo(spec, o, runs_dir, &out));
  ExperimentPass pass(spec, o, runs_dir, logs_dir, &out);
  RETURN_IF_ERROR(pass.Run(todo));
  return out;
}

}  // namespace strata
