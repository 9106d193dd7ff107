#include "launch/scale.h"

#include <thread>

#include "common/config.h"
#include "common/fs.h"
#include "common/log.h"
#include "coordinator/resize_restore.h"
#include "run/options.h"
#include "run/run_lock.h"
#include "run/scale_request.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

// The "resumed" line for `to` workers written after `asked`, if any.
std::optional<nlohmann::json> ResumedLine(const std::string& run_dir, int to,
                                          double asked) {
  for (const auto& j : ReadMembership(run_dir)) {
    if (j.value("event", "") == "resumed" && j.value("to", 0) == to &&
        j.value("training_unix", 0.0) >= asked)
      return j;
  }
  return std::nullopt;
}

// The request's checks, before it is asked: what it asks for (CheckScale),
// then whether a run is going on to take it (a run that has ended: nothing
// holds its run.lock; a run no `strata train` holds, e.g. a test's, is
// asked as before). The worker count asked for (a drain's resolved).
Result<int> CheckRequest(const std::string& run_dir, const Config& config,
                         const ClusterRunOptions& o, int workers,
                         const std::vector<int>& leaving, int data_servers,
                         std::chrono::milliseconds timeout) {
  if (o.mode == RunMode::kLocal)
    return Status::InvalidArgument(
        "{} is a local run (cluster.mode = local): it has no workers to scale",
        run_dir);
  if (workers == 0 && leaving.empty() && data_servers == 0)
    return Status::InvalidArgument(
        "say the new number of workers (--workers N), which to drain "
        "(--drain I) or the new number of data servers (--data-servers M)");
  if (workers == 0)
    workers = o.roles.num_workers() - static_cast<int>(leaving.size());
  RETURN_IF_ERROR(CheckScale(config, o, workers, leaving, data_servers));
  if (!(timeout.count() > 0))
    return Status::InvalidArgument("--timeout must be more than 0 s");
  if (RunLock::Probe(run_dir) == RunLock::State::kFree)
    return Status::FailedPrecondition(
        "no run is going on in {} (nothing holds its run.lock): strata scale "
        "changes a running job; a stopped one resumes on N workers with "
        "strata train --resume {} --set cluster.workers=N",
        run_dir, run_dir);
  return workers;
}

}  // namespace

Result<std::optional<ScaleRequest>> TakeScale(const std::string& run_dir,
                                              const std::atomic<bool>* stop,
                                              Config* life) {
  ASSIGN_OR_RETURN(std::optional<ScaleRequest> scale,
                   TakeAcceptedScale(run_dir));
  if (!scale || (stop != nullptr && stop->load()))
    return std::optional<ScaleRequest>();
  LogInfo("resuming at step {} on {} workers (strata scale)", scale->step,
          scale->workers);
  const int from = static_cast<int>(life->GetInt("cluster.workers"));
  RETURN_IF_ERROR(
      life->ApplyOverride(fmt::format("cluster.workers={}", scale->workers)));
  RETURN_IF_ERROR(life->ApplyOverride("checkpoint.resume=true"));
  RETURN_IF_ERROR(life->ApplyOverride("checkpoint.resume_workers=" +
                                      KeptWorkers(from, scale->leaving)));
  if (scale->data_servers > 0) {
    LogInfo("... and on {} data servers", scale->data_servers);
    RETURN_IF_ERROR(life->ApplyOverride(
        fmt::format("cluster.data_servers={}", scale->data_servers)));
  }
  return scale;
}

Result<ScaleOutcome> ScaleRun(const std::string& run_dir, int workers,
                              std::chrono::milliseconds timeout,
                              const std::atomic<bool>* stop,
                              const std::vector<int>& leaving,
                              int data_servers) {
  auto stopped = [stop] { return stop != nullptr && stop->load(); };
  const std::string config_path = JoinPath(run_dir, "config.toml");
  if (!FileExists(config_path))
    return Status::NotFound("{} is not a run directory (no config.toml)",
                            run_dir);
  ASSIGN_OR_RETURN(Config config, Config::FromTomlFile(config_path));
  ASSIGN_OR_RETURN(ClusterRunOptions o, ClusterRunOptions::FromConfig(config));
  ASSIGN_OR_RETURN(workers, CheckRequest(run_dir, config, o, workers, leaving,
                                         data_servers, timeout));
  ScaleRequest request;
  request.workers = workers;
  request.asked_unix = UnixNow();
  request.leaving = leaving;
  request.data_servers = data_servers;
  RETURN_IF_ERROR(AskScale(run_dir, request));
  LogInfo("asked {} to scale from {} to {} workers{}{}", run_dir,
          o.roles.num_workers(), workers,
          leaving.empty()
              ? ""
              : fmt::format(" (draining worker {})", fmt::join(leaving, ", ")),
          data_servers > 0 ? fmt::format(" and from {} to {} data servers",
                                         o.data_servers, data_servers)
                           : std::string());
  const auto asked = Clock::now();
  while (ScalePending(run_dir)) {
    if (stopped()) {
      WithdrawScale(run_dir);
      return Status::Cancelled("interrupted; the request was withdrawn");
    }
    if (Clock::now() - asked > timeout) {
      WithdrawScale(run_dir);
      return Status::DeadlineExceeded(
          "no coordinator took the request in {:.0f} s (is the run in {} "
          "going on, and training?); withdrawn",
          std::chrono::duration<double>(timeout).count(), run_dir);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const auto taken = Clock::now();
  while (true) {
    const std::string refused = TakeRefusal(run_dir, request.asked_unix);
    if (!refused.empty()) {
      return Status::FailedPrecondition("the run refused to scale: {}",
                                        refused);
    }
    if (auto line = ResumedLine(run_dir, workers, request.asked_unix)) {
      ScaleOutcome out;
      out.from = line->value("from", 0);
      out.to = workers;
      out.step = line->value("step", int64_t{0});
      out.since_request_s = line->value("since_request_s", 0.0);
      return out;
    }
    if (stopped()) {
      return Status::Cancelled(
          "interrupted; the run had taken the request and goes on with it");
    }
    if (Clock::now() - taken > timeout) {
      return Status::DeadlineExceeded(
          "the run took the request but did not train on {} workers within "
          "{:.0f} s (refused, or stopped: see its log)",
          workers, std::chrono::duration<double>(timeout).count());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace strata
