#include "launch/train.h"

#include <optional>

#include "cluster/run_mode.h"
#include "common/fs.h"
#include "common/log.h"
#include "data/load.h"
#include "launch/control_endpoint.h"
#include "launch/processes.h"
#include "launch/scale.h"
#include "launch/threads.h"
#include "run/options.h"
#include "run/scale_request.h"
#include "worker/local_trainer.h"

namespace strata {

Result<Config> ResolveTrainConfig(const TrainRequest& request) {
  Config config = request.base;
  if (!request.resume.empty()) {
    // The run's own resolved config; overrides may still change what a
    // resume allows (the log level, ...), the checkpoint refuses the rest.
    if (!request.config_path.empty())
      return Status::InvalidArgument(
          "--resume continues a run with its own config.toml: drop -c");
    ASSIGN_OR_RETURN(
        config, Config::FromTomlFile(JoinPath(request.resume, "config.toml")));
  } else if (!request.config_path.empty()) {
    ASSIGN_OR_RETURN(config, Config::FromTomlFile(request.config_path));
  }
  for (const std::string& o : request.overrides) {
    Status st = config.ApplyOverride(o);
    if (!st.ok()) return st.WithContext("--set " + o);
  }
  if (!request.resume.empty()) {
    RETURN_IF_ERROR(config.ApplyOverride("checkpoint.resume=true"));
  }
  return config;
}

Result<RunDirectory> TrainRunDirectory(const TrainRequest& request,
                                       const Config& config) {
  if (request.resume.empty()) return RunDirectory::Create(config);
  ASSIGN_OR_RETURN(RunDirectory dir, RunDirectory::Open(request.resume));
  dir.SetTensorBoard(config.GetBool("metrics.tensorboard"));
  return dir;
}

TrainRequest AsLaunchedBefore(TrainRequest request) {
  if (request.resume.empty() || request.processes ||
      !FileExists(JoinPath(request.resume, "pids.json")))
    return request;
  LogInfo(
      "resuming {} as it was launched: one process per node (--processes; "
      "its pids.json)",
      request.resume);
  request.processes = true;
  return request;
}

Status CheckLaunch(const TrainRequest& request, const Config& config) {
  ASSIGN_OR_RETURN(RunMode mode,
                   ParseRunMode(config.GetString("cluster.mode")));
  if (request.processes && mode == RunMode::kLocal)
    return Status::InvalidArgument(
        "--processes needs a cluster mode (cluster.mode = any mode but "
        "local), not local");
  if (request.processes && request.exe.empty())
    return Status::InvalidArgument(
        "--processes needs the strata binary to start the nodes with");
  // The options' own checks (several keys together), before a run
  // directory is made for a run that cannot start.
  if (mode == RunMode::kLocal)
    return LocalRunOptions::FromConfig(config).status();
  return ClusterRunOptions::FromConfig(config).status();
}

namespace {

// One launch of the run as `config` says. `data`: loaded by the first
// life of this process and kept for the next ones (a scale changes only
// the worker count; the checkpoint refuses any other change).
Result<RunSummary> TrainOnce(const TrainRequest& request, const Config& config,
                             const RunDirectory& run_dir,
                             const std::atomic<bool>* stop,
                             std::optional<DatasetSplits>* data,
                             JoinListener* joins) {
  if (request.processes) {
    ASSIGN_OR_RETURN(ClusterSummary summary,
                     TrainProcesses(config, run_dir, request.exe, stop, joins));
    return summary.Brief(0, 0);
  }
  ASSIGN_OR_RETURN(RunMode mode,
                   ParseRunMode(config.GetString("cluster.mode")));
  if (!*data) {
    ASSIGN_OR_RETURN(DatasetSplits loaded, LoadDatasetFromConfig(config));
    data->emplace(std::move(loaded));
  }
  return mode == RunMode::kLocal ? TrainLocal(config, **data, run_dir, stop)
                                 : TrainCluster(config, **data, run_dir, stop);
}

}  // namespace

Result<RunSummary> Train(const TrainRequest& request, const Config& config,
                         const RunDirectory& run_dir,
                         const std::atomic<bool>* stop) {
  RETURN_IF_ERROR(CheckLaunch(request, config));
  // Workers started by hand may join a --processes run (launch/join.h):
  // `strata node --join RUN_DIR` on this machine, or through the control
  // endpoint from another.
  std::unique_ptr<JoinListener> joins;
  if (request.processes) {
    Result<std::unique_ptr<JoinListener>> listening =
        JoinListener::Start(run_dir.path());
    if (listening.ok()) {
      joins = std::move(*listening);
    } else {
      LogWarning("no joins by hand: {}", listening.status().message());
    }
  }
  // cluster.control_address: served across every life of the run.
  ASSIGN_OR_RETURN(std::unique_ptr<ControlEndpoint> control,
                   StartControlEndpoint(config, run_dir, stop, joins.get()));
  Config life = config;
  std::optional<DatasetSplits> data;
  while (true) {
    Result<RunSummary> summary =
        TrainOnce(request, life, run_dir, stop, &data, joins.get());
    // `strata scale` (or cluster.leave_on_loss after a lost worker): the
    // coordinator stopped the workers at a checkpoint and handed the
    // request over; the run goes on from it on the new worker count
    // (docs/design/elastic.md).
    ASSIGN_OR_RETURN(std::optional<ScaleRequest> scale,
                     TakeScale(run_dir.path(), stop, &life));
    if (!scale) return summary;
    if (!summary.ok())
      LogWarning("this life of the run ended: {}", summary.status().message());
  }
}

}  // namespace strata
