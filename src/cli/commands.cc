#include "cli/commands.h"

#include <unistd.h>

#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli/experiment_commands.h"
#include "cli/keys_command.h"
#include "cli/scale_command.h"
#include "cli/shard_command.h"
#include "common/config.h"
#include "common/fs.h"
#include "common/log.h"
#include "data/download.h"
#include "launch/control_endpoint.h"
#include "launch/join.h"
#include "launch/life_channel.h"
#include "launch/node.h"
#include "launch/processes.h"
#include "launch/threads.h"
#include "launch/train.h"
#include "models/model_file.h"
#include "run/run_dir.h"
#include "run/run_lock.h"
#include "worker/local_trainer.h"

namespace strata {
namespace {

struct TrainArgs {
  TrainRequest request;
  bool on_thread = false;  // the run on a thread other than main (diagnostic)
};

struct NodeArgs {
  TrainRequest train;
  std::string role;
  int index = 0;
  std::string coordinator;
  std::string bind = "tcp://127.0.0.1:*";
  std::string run_dir;
  // --processes: the launcher's channel (launch/life_channel.h).
  int life_fd = -1;
  // --join RUN_DIR: a worker started by hand joins that running job
  // (launch/join.h); its first life comes on the channel too. --join
  // tcp://HOST:PORT: through the run's control endpoint, from another
  // machine (with --keys-dir for a secured run).
  std::string join;
  std::string keys_dir;
};

// Where a joining worker's lives come from: the launcher's channel, or
// (another machine) polls of the run's control endpoint.
using LifeWait = std::function<Result<std::optional<NextLife>>(bool had_life)>;

bool JoinsRemotely(const NodeArgs& args) {
  return args.join.rfind("tcp://", 0) == 0;
}

// Takes the run directory's run.lock into *lock; false (logged) when
// another process runs it.
bool HoldRun(const std::string& dir, std::optional<RunLock>* lock) {
  Result<std::optional<RunLock>> held = RunLock::Hold(dir);
  if (!held.ok()) {
    LogError("{}", held.status().message());
    return false;
  }
  *lock = std::move(held).value();
  return true;
}

// The end of a run: its final figures, where it is; 130 when interrupted.
int Done(const Result<RunSummary>& summary, const RunDirectory& run_dir) {
  if (!summary.ok()) {
    LogError("{}", summary.status().message());
    return 1;
  }
  const RunSummary& done = *summary;
  const std::string figures =
      done.evaluated ? fmt::format(
                           "train loss {:.4f} acc {:.4f} | val loss {:.4f} acc "
                           "{:.4f}",
                           done.final_train_loss, done.final_train_acc,
                           done.final_val_loss, done.final_val_acc)
                     : std::string("no final evaluation");
  LogInfo("done{}: {} | {:.1f} s, {:.0f} samples/s",
          done.interrupted ? " (interrupted)" : "", figures, done.wall_s,
          done.samples_per_s);
  if (done.evaluated && (!std::isfinite(done.final_train_loss) ||
                         !std::isfinite(done.final_val_loss))) {
    LogWarning(
        "the final model's loss is not a number: the training diverged (a "
        "smaller train.lr?)");
  }
  std::printf("run directory: %s\n", run_dir.path().c_str());
  return done.interrupted ? 130 : 0;
}

// The run, on this thread or (--on-thread, a diagnostic:
// docs/results/2026-11-26-gpu-h200-profile.md) on a thread other than main,
// as a cluster's workers are.
Result<RunSummary> TrainOn(const TrainArgs& args, const Config& config,
                           const RunDirectory& run_dir,
                           const std::atomic<bool>* stop) {
  if (!args.on_thread) return Train(args.request, config, run_dir, stop);
  std::optional<Result<RunSummary>> summary;
  std::thread t(
      [&] { summary.emplace(Train(args.request, config, run_dir, stop)); });
  t.join();
  return std::move(*summary);
}

int RunTrain(const TrainArgs& given, const std::atomic<bool>* stop) {
  TrainArgs args = given;
  args.request = AsLaunchedBefore(given.request);
  auto config = ResolveTrainConfig(args.request);
  if (!config.ok()) {
    LogError("{}", config.status().message());
    return 2;
  }
  SetLogLevel(LogLevelNamed(config->GetString("run.log_level")));
  Status launch = CheckLaunch(args.request, *config);
  if (!launch.ok()) {
    LogError("{}", launch.message());
    return 2;
  }
  Result<RunDirectory> run_dir = TrainRunDirectory(args.request, *config);
  if (!run_dir.ok()) {
    LogError("{}", run_dir.status().message());
    return 1;
  }
  // Held until the run ends: a second trainer of this directory is refused.
  std::optional<RunLock> lock;
  if (!HoldRun(run_dir->path(), &lock)) return 1;
  LogInfo("run directory: {}", run_dir->path());
  return Done(TrainOn(args, *config, *run_dir, stop), *run_dir);
}

// A node's role, run again in this process for every next life the
// launcher gives it (--life-fd: a scale kept it) until its channel closes; the
// last life's status. A life that failed (a lost worker stopped it) may
// still have a next one (cluster.leave_on_loss).
Status RunNodeLives(const NodeArgs& args, const Config& first, Role role,
                    int index, const RunDirectory& run_dir,
                    const LifeWait& wait, const std::atomic<bool>* stop) {
  std::optional<DatasetSplits> data;  // loaded once, kept across lives
  // A joining worker's first life comes on the channel.
  const bool joining = !args.join.empty();
  bool joined = false;
  Status st = joining ? Status::Ok()
                      : RunNode(first, role, index, args.coordinator, args.bind,
                                run_dir, stop, &data, &joined);
  // Its data or plan failed: another life would fail alike, and the
  // launcher learns of it sooner from the process's end than by waiting.
  if (!joining && !joined) return st;
  bool ran = !joining;
  const std::string run = joining ? args.join : run_dir.path();
  while (wait) {
    if (!st.ok() && st.code() == Status::Code::kCancelled && stop != nullptr &&
        stop->load())
      return st;  // interrupted
    Result<std::optional<NextLife>> next = wait(ran);
    // No word (the run is over, this node left it, or the launcher is
    // gone): this life's status says how the node ended.
    if (!next.ok() || !next->has_value()) {
      if (!ran && !next.ok() &&
          next.status().code() == Status::Code::kDeadlineExceeded)
        return Status::DeadlineExceeded(
            "the run at {} did not take this worker within {} s (no "
            "checkpoint round took its scale request?)",
            run, kLifeWait.count());
      if (!next.ok() && st.ok()) return next.status();
      if (!ran)
        return Status::FailedPrecondition(
            "the run at {} ended before it took this worker", run);
      return st;
    }
    ran = true;
    if (!st.ok()) LogWarning("{}; the launcher goes on", st.message());
    std::optional<NextLife> life = std::move(next).value();
    // The run's config.toml again: a scale rewrote the worker count.
    ASSIGN_OR_RETURN(Config config, ResolveTrainConfig(args.train));
    for (const std::string& o : life->overrides)
      RETURN_IF_ERROR(config.ApplyOverride(o));
    if (life->index >= 0 && life->index != index) {
      LogInfo("{} {} is {} {} from now on (a worker before it left)",
              RoleName(role), index, RoleName(role), life->index);
      index = life->index;
    }
    LogInfo(
        "{} {}: running again in this process (pid {}) for the run's "
        "next life",
        RoleName(role), index, ::getpid());
    st = RunNode(config, role, index, life->coordinator, args.bind, run_dir,
                 stop, &data);
  }
  return st;
}

// --join tcp://HOST:PORT: asks the run behind that control endpoint to
// take this process as a worker; its config goes into the node's own run
// directory (--run-dir, default ./strata-join-<pid>), read again at every
// life. The wait for its lives.
Result<LifeWait> JoinRemotely(NodeArgs& args, const std::atomic<bool>* stop) {
  // Loopback reaches this machine only: the run's nodes must reach this
  // worker at its --bind.
  auto loopback = [](const std::string& e) {
    return e.rfind("tcp://127.", 0) == 0 || e.rfind("tcp://localhost", 0) == 0;
  };
  if (loopback(args.bind) && !loopback(args.join))
    return Status::InvalidArgument(
        "--bind {} is this machine only, and the run at {} is elsewhere: "
        "give --bind tcp://THIS_MACHINES_IP:*",
        args.bind, args.join);
  if (args.run_dir.empty())
    args.run_dir = fmt::format("strata-join-{}", ::getpid());
  RETURN_IF_ERROR(MakeDirs(args.run_dir));
  char host[256] = "";
  ::gethostname(host, sizeof(host) - 1);
  // Generous: the endpoint answers one request at a time, and a scale
  // holds it until the run trains again.
  ASSIGN_OR_RETURN(RemoteJoin join,
                   AskToJoin(args.join, args.keys_dir, host, ::getpid(),
                             std::chrono::seconds(30)));
  const std::string path = JoinPath(args.run_dir, "config.toml");
  RETURN_IF_ERROR(WriteFileAtomic(path, join.config));
  if (args.train.config_path.empty()) args.train.config_path = path;
  // Its metrics.jsonl lines go into the run's directory, through the
  // coordinator; the user's --set still comes last.
  args.train.overrides.insert(args.train.overrides.begin(),
                              "cluster.forward_metrics=true");
  LogInfo(
      "asked the run at {} to take this process (pid {} on {}) as a worker; "
      "its config is in {}",
      args.join, ::getpid(), host, path);
  return LifeWait([join, path, stop](bool had_life) mutable {
    Result<std::optional<NextLife>> next =
        WaitRemoteLife(join, kLifeWait, had_life, stop);
    // The run's config as it is now (a scale rewrote the worker count).
    if (next.ok() && next->has_value() && !(*next)->config.empty()) {
      Status st = WriteFileAtomic(path, (*next)->config);
      if (!st.ok()) return Result<std::optional<NextLife>>(st);
    }
    return next;
  });
}

// The node's role and index, from the arguments or the MPI/Slurm rank.
Status PlaceNode(const NodeArgs& args, const Config& config, Role* role,
                 int* index) {
  *index = args.index;
  if (args.role.empty()) {
    RETURN_IF_ERROR(RoleFromRank(config, role, index));
  } else {
    ASSIGN_OR_RETURN(*role, ParseRole(args.role));
  }
  if (args.coordinator.empty() && args.join.empty())
    return Status::InvalidArgument(
        "--coordinator tcp://HOST:PORT is required (the coordinator binds it)");
  return Status::Ok();
}

// The node's run directory: --run-dir, the run a local --join names, or
// <run.dir>/<run.name or "cluster">.
std::string NodeDir(const NodeArgs& args, const Config& config) {
  if (!args.join.empty() && !JoinsRemotely(args)) return args.join;
  if (!args.run_dir.empty()) return args.run_dir;
  const std::string& name = config.GetString("run.name");
  return config.GetString("run.dir") + "/" + (name.empty() ? "cluster" : name);
}

int RunNodeCommand(const NodeArgs& given, const std::atomic<bool>* stop) {
  NodeArgs args = given;
  LifeWait wait;
  if (JoinsRemotely(args)) {
    Result<LifeWait> w = JoinRemotely(args, stop);
    if (!w.ok()) {
      LogError("{}", w.status().message());
      return 1;
    }
    wait = std::move(*w);
  } else if (!args.join.empty() && args.train.config_path.empty()) {
    // A joining worker reads the run's own config (each life again).
    args.train.config_path = JoinPath(args.join, "config.toml");
  }
  if (!args.join.empty()) args.role = "worker";
  auto config = ResolveTrainConfig(args.train);
  if (!config.ok()) {
    LogError("{}", config.status().message());
    return 2;
  }
  SetLogLevel(LogLevelNamed(config->GetString("run.log_level")));
  Role role;
  int index;
  Status placed = PlaceNode(args, *config, &role, &index);
  if (!placed.ok()) {
    LogError("{}", placed.message());
    return 2;
  }
  Result<RunDirectory> dir = RunDirectory::Open(NodeDir(args, *config));
  if (!dir.ok()) {
    LogError("{}", dir.status().message());
    return 1;
  }
  RunDirectory& run_dir = *dir;
  run_dir.SetTensorBoard(config->GetBool("metrics.tensorboard"));
  // A coordinator started by hand runs the directory, as `strata train`
  // does; the other nodes write beside it.
  std::optional<RunLock> lock;
  if (role == Role::kCoordinator && !HoldRun(run_dir.path(), &lock)) return 1;
  if (role == Role::kCoordinator && !FileExists(run_dir.File("config.toml"))) {
    Status written = config->WriteToml(run_dir.File("config.toml"));
    if (!written.ok()) LogWarning("config.toml: {}", written.message());
  }
  if (!args.join.empty() && !JoinsRemotely(args)) {
    Result<int> fd = ConnectToJoin(args.join);
    if (!fd.ok()) {
      LogError("{}", fd.status().message());
      return 1;
    }
    LogInfo("asked the run in {} to take this process (pid {}) as a worker",
            args.join, ::getpid());
    args.life_fd = *fd;
  }
  if (!wait && args.life_fd >= 0) {
    wait = [fd = args.life_fd, stop](bool) {
      return WaitNextLife(fd, kLifeWait, stop);
    };
  }
  Status st = RunNodeLives(args, *config, role, index, run_dir, wait, stop);
  if (!st.ok()) {
    LogError("{}", st.message());
    return 1;
  }
  // Interrupted (Ctrl-C, or SIGTERM from scancel): 130, as strata train.
  return stop != nullptr && stop->load() ? 130 : 0;
}

// strata train
void AddTrainCommand(CLI::App& app, int* exit_code,
                     const std::atomic<bool>* stop) {
  auto train_args = std::make_shared<TrainArgs>();
  CLI::App* train = app.add_subcommand(
      "train",
      "Train a model. With no arguments: the embedded default (synthetic data, "
      "a small MLP). cluster.mode = \"local\" trains in this process.");
  train
      ->add_option("-c,--config", train_args->request.config_path,
                   "TOML run config")
      ->check(CLI::ExistingFile);
  train
      ->add_option(
          "--set", train_args->request.overrides,
          "override a config key: --set section.key=value (repeatable)")
      ->take_all();
  train->add_flag("--processes", train_args->request.processes,
                  "run every cluster node as its own process (loopback TCP) "
                  "instead of threads");
  train
      ->add_flag("--on-thread", train_args->on_thread,
                 "run the training on a thread other than main, as a "
                 "cluster's workers are (a diagnostic; "
                 "docs/results/2026-11-26-gpu-h200-profile.md)")
      ->group("");  // hidden from --help
  train
      ->add_option("--resume", train_args->request.resume,
                   "continue RUN_DIR (a local or cluster run) from its newest "
                   "checkpoint, with its own config "
                   "(docs/design/checkpoints.md)")
      ->check(CLI::ExistingDirectory);
  train->footer("\n" + Config::SchemaHelp());

  train->callback([=]() {
    train_args->request.exe = SelfExe();
    *exit_code = RunTrain(*train_args, stop);
  });
}

// strata node
void AddNodeCommand(CLI::App& app, int* exit_code,
                    const std::atomic<bool>* stop) {
  auto node_args = std::make_shared<NodeArgs>();
  CLI::App* node =
      app.add_subcommand("node",
                         "Run one node of a cluster (one process per role, on "
                         "one machine or many). Without "
                         "--role, the role comes from the MPI/Slurm rank: 0 "
                         "coordinator, 1..k servers, then "
                         "workers, then the evaluator, then the data servers "
                         "(cluster.data_servers).");
  node->add_option("--role", node_args->role,
                   "coordinator | server | worker | evaluator | data");
  node->add_option("--index", node_args->index,
                   "which server, worker or data server (0-based)");
  node->add_option(
      "--coordinator", node_args->coordinator,
      "the coordinator's endpoint, tcp://HOST:PORT or ucx://HOST:PORT (the "
      "coordinator binds it)");
  node->add_option("--bind", node_args->bind,
                   "this node's endpoint, tcp://IP:PORT or tcp://IP:* "
                   "(ucx://IP:* with a ucx:// coordinator; IP: where other "
                   "nodes reach it)");
  node->add_option("--run-dir", node_args->run_dir,
                   "run directory to write into (default <run.dir>/<run.name "
                   "or 'cluster'>)");
  node->add_option("--life-fd", node_args->life_fd,
                   "(the --processes launcher's) a channel to wait on for the "
                   "run's next life after the role ends")
      ->group("");
  node->add_option("--join", node_args->join,
                   "join a `strata train --processes` run, training, as one "
                   "more worker: RUN_DIR on the machine that holds it, or "
                   "tcp://HOST:PORT, its cluster.control_address, from "
                   "another (with --bind tcp://THIS_IP:*); the run's own "
                   "config.toml unless -c");
  node->add_option("--keys-dir", node_args->keys_dir,
                   "--join tcp://...: the directory with the cluster key "
                   "pair of a run under cluster.security = \"curve\"");
  node->add_option("-c,--config", node_args->train.config_path,
                   "TOML run config")
      ->check(CLI::ExistingFile);
  node->add_option("--set", node_args->train.overrides,
                   "override a config key (repeatable)")
      ->take_all();
  node->callback([=]() { *exit_code = RunNodeCommand(*node_args, stop); });
}

// strata export: a run's final model (or a checkpoint's), checked and
// copied. The exit code.
int RunExport(const std::string& run_dir, const std::string& out,
              const std::string& step_text) {
  if (!step_text.empty()) {
    int64_t step = -1;
    if (step_text != "newest") {
      if (step_text.find_first_not_of("0123456789") != std::string::npos) {
        LogError("--checkpoint \"{}\": a step number or \"newest\"", step_text);
        return 2;
      }
      step = std::stoll(step_text);
    }
    auto dir = ExportLocalCheckpoint(run_dir, step, out);
    if (!dir.ok()) {
      LogError("{}", dir.status().message());
      return dir.status().code() == Status::Code::kNotFound ? 2 : 1;
    }
    std::printf("%s: the model of %s\n", JoinPath(*dir, kModelFile).c_str(),
                step < 0 ? "the newest checkpoint"
                         : ("the checkpoint of step " + step_text).c_str());
    return 0;
  }
  auto info = CheckModelFiles(run_dir);
  if (!info.ok()) {
    LogError("{}", info.status().message());
    return info.status().code() == Status::Code::kNotFound ? 2 : 1;
  }
  std::string dir = run_dir;
  if (!out.empty()) {
    dir = out;
    Status st = MakeDirs(dir);
    for (const char* f : {kModelFile, kModelInfoFile}) {
      if (!st.ok()) break;
      auto bytes = ReadFile(JoinPath(run_dir, f));
      st = bytes.ok() ? WriteFileAtomic(JoinPath(dir, f), *bytes)
                      : bytes.status();
    }
    if (!st.ok()) {
      LogError("{}", st.message());
      return 1;
    }
  }
  std::printf("%s: %s, %zu tensors, %lld parameters\n%s: its architecture\n",
              JoinPath(dir, kModelFile).c_str(),
              (*info)["model"].get<std::string>().c_str(),
              (*info)["tensors"].size(),
              static_cast<long long>((*info)["parameters"].get<int64_t>()),
              JoinPath(dir, kModelInfoFile).c_str());
  return 0;
}

// strata export
void AddExportCommand(CLI::App& app, int* exit_code) {
  auto export_run = std::make_shared<std::string>();
  auto export_out = std::make_shared<std::string>();
  CLI::App* exp = app.add_subcommand(
      "export",
      "Check a finished run's trained model (model.safetensors: every "
      "parameter and buffer under the model's tensor names, and model.json: "
      "its architecture) and copy both to a directory, for use outside "
      "strata (docs/design/models.md).");
  exp->add_option("run_dir", *export_run, "run directory")
      ->required()
      ->check(CLI::ExistingDirectory);
  exp->add_option("-o,--output", *export_out,
                  "directory to copy the two files into (created; default: "
                  "only check them in place, or <run_dir>/export-step-<N> "
                  "with --checkpoint)");
  auto export_step = std::make_shared<std::string>();
  exp->add_option(
      "--checkpoint", *export_step,
      "export a checkpoint's model instead of the final one: its "
      "step, or \"newest\" (local runs; docs/design/checkpoints.md)");
  exp->callback([=]() {
    *exit_code = RunExport(*export_run, *export_out, *export_step);
  });
}

// strata data download
void AddDataCommand(CLI::App& app, int* exit_code) {
  CLI::App* data = app.add_subcommand("data", "Dataset utilities");
  data->require_subcommand(1);
  auto dl_name = std::make_shared<std::string>();
  auto dl_dir = std::make_shared<std::string>("data");
  auto dl_mirror = std::make_shared<std::string>();
  CLI::App* download = data->add_subcommand(
      "download",
      "Fetch a dataset's official archives (curl) and check their md5");
  download
      ->add_option("name", *dl_name,
                   "mnist | fashion-mnist | cifar10 | cifar100")
      ->required()
      ->check(CLI::IsMember(KnownDownloadDatasets()));
  download->add_option("--dir", *dl_dir, "directory to put the files in");
  download->add_option("--mirror", *dl_mirror,
                       "base URL to fetch from instead of the official one "
                       "(e.g. file:///srv/datasets/)");
  download->callback([=]() {
    Status st = DownloadDataset(*dl_name, *dl_dir, *dl_mirror);
    if (!st.ok()) {
      LogError("{}", st.message());
      *exit_code = 1;
      return;
    }
    std::printf("%s is in %s\n", dl_name->c_str(), dl_dir->c_str());
    *exit_code = 0;
  });
}

}  // namespace

void AddCommands(CLI::App& app, int* exit_code, const std::atomic<bool>* stop) {
  app.require_subcommand(1);
  app.option_defaults()->always_capture_default();

  AddTrainCommand(app, exit_code, stop);
  AddNodeCommand(app, exit_code, stop);
  AddExperimentCommands(app, exit_code, stop);  // experiment, report
  AddShardCommand(app, exit_code);
  AddScaleCommand(app, exit_code, stop);
  AddKeysCommand(app, exit_code);  // keys generate
  AddExportCommand(app, exit_code);
  AddDataCommand(app, exit_code);  // data download
}

std::string SelfExe() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "strata";
  buf[n] = '\0';
  return buf;
}

}  // namespace strata
