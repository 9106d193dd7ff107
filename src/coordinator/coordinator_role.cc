#include "coordinator/coordinator_role.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "cluster/cluster_metrics.h"
#include "common/fs.h"
#include "common/log.h"
#include "common/seconds.h"
#include "coordinator/cluster_checkpoints.h"
#include "coordinator/coordinator.h"
#include "coordinator/metrics_endpoint.h"
#include "coordinator/resize_restore.h"
#include "coordinator/summary_gather.h"
#include "run/emulation.h"
#include "run/scale_request.h"
#include "run/stragglers.h"
#include "run/timeline_trace.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A resume on another number of workers: recorded, with the samples of the
// workers it left out still in the run's total, and the workers' account
// of the rest of the epoch they re-planned.
void AddResize(const ClusterSummary::Resize& resize, ClusterSummary& s) {
  if (resize.from_workers == 0) return;
  s.resize = resize;
  s.samples += resize.retired_samples;
  s.samples_per_s = s.train_s > 0 ? s.samples / s.train_s : 0.0;
  for (const auto& w : s.workers) {
    if (!w || w->replan_examples < 0) continue;
    s.resize.remainder_examples = w->replan_examples;
    s.resize.remainder_max_tv =
        std::max(s.resize.remainder_max_tv, w->replan_tv);
  }
  // The data service re-plans in its data servers (each computes the
  // whole split).
  if (!s.data_service) return;
  for (const DataServerReport& d : s.data_service->data_servers) {
    if (d.replan_examples < 0) continue;
    s.resize.remainder_examples = d.replan_examples;
    s.resize.remainder_max_tv =
        std::max(s.resize.remainder_max_tv, d.replan_max_tv);
  }
}

// One run of the coordinator role, from its options to its summary.
class CoordinatorRun {
 public:
  CoordinatorRun(const Config& config, const ClusterRunOptions& o,
                 const RunDirectory& run_dir, const std::atomic<bool>* stop)
      : config_(config),
        o_(o),
        run_dir_(run_dir),
        stop_(stop),
        checkpoints_(config, o, run_dir) {}

  Result<ClusterSummary> Run(std::unique_ptr<Transport> transport,
                             std::shared_ptr<const Checkpoint> resume_from);

 private:
  CoordinatorOptions Options();
  Status StartMetrics(CoordinatorOptions& co);
  // A worker's metrics.jsonl line (cluster.forward_metrics) into the run's
  // metrics.jsonl; a malformed one is dropped with a warning.
  void WriteForwardedMetrics(NodeId from, const std::string& text) const;
  // Waits for the workers, looking every 50 ms (a Ctrl-C is seen within
  // that); the run's status.
  Status Supervise(Coordinator& c);
  // checkpoint.every_s: a round every so many seconds of training.
  void TimedCheckpoint(Coordinator& c);
  // Ctrl-C: with checkpoints one last round (the workers stop after it),
  // otherwise, or when it fails or takes too long, plain stops.
  void Interrupt(Coordinator& c, bool training);
  // The last round and the stops (Interrupt, a scale): asked once, then
  // the stops repeated every look while the round is not pending.
  void StopAfterRound(Coordinator& c, bool training);
  // `strata scale` (run/scale_request.h): looks every 0.2 s for a request;
  // one the run can take stops it at a checkpoint, for the launcher to
  // resume on the new worker count.
  void WatchScale(Coordinator& c, bool training);
  // Once training runs: a resume on another worker count goes into
  // membership.jsonl, with the time since its request.
  void NoteTraining();
  // After the run stopped for a scale: hands it to the launcher.
  void HandOverScale();
  // cluster.leave_on_loss: a lockstep run stopped by lost workers (and
  // nothing else lost) hands the launcher a drain of them, to go on from
  // this life's newest checkpoint on the others. True when it did.
  bool HandOverLoss(Coordinator& c, const Status& run_status);
  // cluster.leave_on_loss in the free modes (async, ssp, easgd): the run
  // goes on without a lost worker anyway; with this key it stops at a
  // checkpoint of the others, as a drain of the lost one would, so that
  // the rest of its epoch is re-planned over them.
  void WatchLosses(Coordinator& c, bool training);
  // The lost workers' indices; empty when a node of another role is lost
  // too (that is not a leave).
  std::vector<int> LostWorkersOnly(Coordinator& c) const;
  // cluster.timeline: timeline.json in the run directory.
  void WriteTimeline(const std::vector<timeline::NodeTimeline>& nodes);
  void SetPhase(Coordinator& c, RunPhase phase) {
    if (metrics_) metrics_->SetPhase(phase, c.LostNodes());
  }

  const Config& config_;
  const ClusterRunOptions& o_;
  const RunDirectory& run_dir_;
  const std::atomic<bool>* const stop_;
  const Clock::time_point start_ = Clock::now();
  ClusterCheckpoints checkpoints_;
  std::unique_ptr<MetricsEndpoint> metrics_;
  Coordinator* coordinator_ = nullptr;  // set once it exists
  std::atomic<int64_t> last_checkpoint_ns_{0};
  bool interrupted_ = false;
  bool vanished_ = false;
  // A Ctrl-C with checkpoints on: when the last round was asked for, and
  // how many rounds were done before it.
  Clock::time_point stop_round_asked_{};
  int64_t stop_round_after_ = 0;
  bool stopping_ = false;  // the last round was asked (Ctrl-C or scale)
  std::optional<ScaleRequest> scale_;  // taken; the run stops for it
  Clock::time_point scale_looked_{};
  bool training_noted_ = false;
  bool scale_for_loss_ = false;  // scale_ is a drain of lost workers
};

CoordinatorOptions CoordinatorRun::Options() {
  CoordinatorOptions co;
  co.roles = o_.roles;
  co.heartbeat_timeout = o_.heartbeat_timeout;
  co.heartbeat_interval = o_.heartbeat_interval;
  co.join_timeout = o_.request_timeout;
  if (const std::string links = DescribeLinks(config_); !links.empty()) {
    co.never_registered_hint =
        "emulated links are on, and a registration crosses them too (" + links +
        ")";
  }
  co.staleness = o_.staleness;
  co.worker_loss_fatal = WorkerLossFatal(o_.mode);
  co.min_workers = o_.min_workers;
  // Below the minimum, a run that replaces lost workers waits as long as
  // for a lost server's replacement.
  if (o_.restart) co.min_workers_wait = o_.restart_timeout;
  if (o_.restart && !Lockstep(o_.mode)) {
    // A lost server is replaced in place (free modes); lockstep modes start
    // the whole cluster again (launch/processes.cc).
    co.server_restart_timeout = o_.restart_timeout;
    co.worker_restart = true;
  }
  co.on_metrics_line = [this](NodeId from, const std::string& text) {
    WriteForwardedMetrics(from, text);
  };
  if (!o_.checkpoints()) return co;
  // Sync k-of-n workers are not at one step: they meet as free ones do,
  // each leaving the servers while it waits (Exchange::PauseForRound).
  co.checkpoint_lockstep = Lockstep(o_.mode) && !o_.leader_first;
  co.checkpoint_resumed_step = checkpoints_.step();
  co.on_restore = [this](NodeId id) { return checkpoints_.Restore(id); };
  co.on_checkpoint = [this](std::map<NodeId, Message>& arrivals) {
    const auto ts = coordinator_->TrainingStart();
    const double train_s =
        checkpoints_.prior_train_s() +
        (ts == Clock::time_point{} ? 0.0 : Seconds(Clock::now() - ts));
    Status st = checkpoints_.Write(*coordinator_, arrivals, train_s);
    last_checkpoint_ns_ = Clock::now().time_since_epoch().count();
    return st;
  };
  return co;
}

void CoordinatorRun::WriteForwardedMetrics(NodeId from,
                                           const std::string& text) const {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) {
    LogWarning(
        "coordinator: {} sent a metrics line that is not a JSON object; "
        "dropped",
        o_.roles.Describe(from));
    return;
  }
  const Status st = run_dir_.AppendJson("metrics.jsonl", j);
  if (!st.ok()) LogWarning("coordinator: metrics.jsonl: {}", st.message());
}

Status CoordinatorRun::StartMetrics(CoordinatorOptions& co) {
  if (o_.metrics_address.empty()) return Status::Ok();
  const std::string& path = run_dir_.path();
  ASSIGN_OR_RETURN(metrics_,
                   MetricsEndpoint::Start(
                       o_.metrics_address, o_.roles,
                       {{"mode", RunModeName(o_.mode)},
                        {"model", o_.model_name},
                        {"dataset", o_.dataset_name},
                        {"run", path.substr(path.find_last_of('/') + 1)}}));
  MetricsEndpoint* m = metrics_.get();
  co.on_status = [m](NodeId id, const std::string& text) {
    m->Update(id, text);
  };
  LogInfo("coordinator: Prometheus metrics at {}/metrics", metrics_->url());
  return Status::Ok();
}

void CoordinatorRun::TimedCheckpoint(Coordinator& c) {
  const int64_t last = last_checkpoint_ns_.load();
  const auto since =
      last == 0 ? Clock::now() - c.TrainingStart()
                : Clock::now() - Clock::time_point(Clock::duration(last));
  if (Seconds(since) < o_.checkpoint_every_s) return;
  c.RequestCheckpoint(/*stop_after=*/false);
  last_checkpoint_ns_ = Clock::now().time_since_epoch().count();
}

void CoordinatorRun::Interrupt(Coordinator& c, bool training) {
  if (!interrupted_) {
    interrupted_ = true;
    LogWarning(
        "interrupted: {}stopping the workers, then evaluating and writing "
        "the summary",
        o_.checkpoints() ? "writing a checkpoint, " : "");
  }
  StopAfterRound(c, training);
}

void CoordinatorRun::StopAfterRound(Coordinator& c, bool training) {
  if (!stopping_) {
    stopping_ = true;
    if (o_.checkpoints() && training) {
      stop_round_asked_ = Clock::now();
      stop_round_after_ = c.checkpoint_rounds();
      c.RequestCheckpoint(/*stop_after=*/true);
    }
  }
  const bool round_pending =
      stop_round_asked_ != Clock::time_point{} &&
      Clock::now() - stop_round_asked_ < o_.request_timeout &&
      (c.checkpoint_rounds() <= stop_round_after_ || c.last_checkpoint_ok());
  // Repeated every look: a stop sent while a worker was still starting (not
  // yet connected) would be lost, and it would train to the end.
  if (!round_pending) c.StopWorkers();
}

Status CoordinatorRun::Supervise(Coordinator& c) {
  while (true) {
    Status st = c.WaitForWorkers(milliseconds(50));
    if (st.code() != Status::Code::kDeadlineExceeded) return st;
    const bool training = c.TrainingStart() != Clock::time_point{};
    SetPhase(c, training ? RunPhase::kTraining : RunPhase::kJoining);
    if (training && o_.fail_role == Role::kCoordinator &&
        Clock::now() - c.TrainingStart() >= o_.fail_after) {
      // Fault injection: the coordinator goes silent, as a crash would;
      // every node must notice and stop itself.
      LogWarning("coordinator vanishes (cluster.fail_node)");
      vanished_ = true;
      return Status::Cancelled("the coordinator crashed (cluster.fail_node)");
    }
    if (o_.checkpoint_every_s > 0 && training && !stopping_) TimedCheckpoint(c);
    if (training) NoteTraining();
    WatchLosses(c, training);
    WatchScale(c, training);
    if (stop_ != nullptr && stop_->load()) Interrupt(c, training);
  }
}

void CoordinatorRun::WatchScale(Coordinator& c, bool training) {
  if (scale_) return StopAfterRound(c, training);
  if (!training || stopping_ ||
      Clock::now() - scale_looked_ < milliseconds(200))
    return;
  scale_looked_ = Clock::now();
  Result<std::optional<ScaleRequest>> asked = PendingScale(run_dir_.path());
  if (asked.ok() && !asked->has_value()) return;
  Status refused = asked.ok()
                       ? CheckScale(config_, o_, (*asked)->workers,
                                    (*asked)->leaving, (*asked)->data_servers)
                       : asked.status();
  if (!refused.ok()) {
    LogError("scale request refused: {}", refused.message());
    Status st = RefuseScale(run_dir_.path(), refused.message());
    if (!st.ok()) WithdrawScale(run_dir_.path());
    return;
  }
  scale_ = **asked;
  // The round it stops at hands its state to the next life in memory.
  checkpoints_.KeepForNextLife();
  LogWarning(
      "scaling from {} to {} workers{}: a checkpoint, then the run resumes "
      "on them",
      o_.roles.num_workers(), scale_->workers,
      scale_->data_servers > 0
          ? fmt::format(" and from {} to {} data servers", o_.data_servers,
                        scale_->data_servers)
          : std::string());
  StopAfterRound(c, training);
}

void CoordinatorRun::NoteTraining() {
  if (training_noted_) return;
  training_noted_ = true;
  const ClusterSummary::Resize& r = checkpoints_.resize();
  if (r.from_workers == 0) return;
  // The request that led here, if a `strata scale` did.
  double asked = 0;
  for (const auto& j : ReadMembership(run_dir_.path())) {
    const std::string event = j.value("event", "");
    if ((event == "scale" || event == "lost") &&
        j.value("to", 0) == r.to_workers)
      asked = j.value("asked_unix", 0.0);
  }
  const double now = UnixNow();
  const char* from = checkpoints_.from_memory() ? "memory" : "disk";
  nlohmann::json line{{"event", "resumed"},   {"from", r.from_workers},
                      {"to", r.to_workers},   {"step", r.at_step},
                      {"training_unix", now}, {"state_from", from}};
  if (asked > 0) {
    line["since_request_s"] = now - asked;
    LogInfo(
        "scaled from {} to {} workers: training again {:.2f} s after the "
        "request (the state from {})",
        r.from_workers, r.to_workers, now - asked, from);
  }
  Status st = AppendMembership(run_dir_.path(), line);
  if (!st.ok()) LogWarning("membership.jsonl: {}", st.message());
}

void CoordinatorRun::HandOverScale() {
  if (!scale_) return;
  if (checkpoints_.last_step() < 0 || !coordinator_->last_checkpoint_ok()) {
    LogError(
        "scaling to {} workers: the run stopped without its checkpoint; "
        "resume it by hand (strata train --resume {} --set "
        "cluster.workers={}{})",
        scale_->workers, run_dir_.path(), scale_->workers,
        scale_->data_servers > 0 ? fmt::format(" --set cluster.data_servers={}",
                                               scale_->data_servers)
                                 : std::string());
    return;
  }
  const int64_t step = checkpoints_.last_step();
  nlohmann::json line{{"event", scale_for_loss_ ? "lost" : "scale"},
                      {"from", o_.roles.num_workers()},
                      {"to", scale_->workers},
                      {"step", step},
                      {"asked_unix", scale_->asked_unix},
                      {"stopped_unix", UnixNow()}};
  if (!scale_->leaving.empty()) line["leaving"] = scale_->leaving;
  if (scale_->data_servers > 0) {
    line["data_servers_from"] = o_.data_servers;
    line["data_servers"] = scale_->data_servers;
  }
  Status st = AppendMembership(run_dir_.path(), line);
  if (st.ok()) st = AcceptScale(run_dir_.path(), *scale_, step);
  if (!st.ok())
    LogError("scaling to {} workers: {}", scale_->workers, st.message());
}

std::vector<int> CoordinatorRun::LostWorkersOnly(Coordinator& c) const {
  std::vector<int> leaving;
  for (NodeId id : c.LostIds()) {
    Role role;
    int index;
    if (!o_.roles.RoleOf(id, &role, &index).ok() || role != Role::kWorker)
      return {};  // a server or the evaluator: not a leave
    leaving.push_back(index);
  }
  std::sort(leaving.begin(), leaving.end());
  return leaving;
}

void CoordinatorRun::WatchLosses(Coordinator& c, bool training) {
  if (!o_.leave_on_loss || Lockstep(o_.mode) || scale_ || stopping_ ||
      !training)
    return;
  const std::vector<int> leaving = LostWorkersOnly(c);
  const int to = o_.roles.num_workers() - static_cast<int>(leaving.size());
  // Below the minimum, CheckMinWorkers stops the run; without a checkpoint
  // of this life the lost worker's state is missing: it goes on without.
  if (leaving.empty() || to < o_.min_workers || to < 1 ||
      checkpoints_.last_step() < 0)
    return;
  ScaleRequest drain;
  drain.workers = to;
  drain.asked_unix = UnixNow();
  drain.leaving = leaving;
  scale_ = drain;
  scale_for_loss_ = true;
  LogWarning(
      "cluster.leave_on_loss: worker {} lost; a checkpoint of the others, "
      "then the run goes on on {} workers, the rest of the epoch re-planned",
      fmt::join(leaving, ", "), to);
  StopAfterRound(c, training);
}

bool CoordinatorRun::HandOverLoss(Coordinator& c, const Status& run_status) {
  if (!o_.leave_on_loss || !Lockstep(o_.mode) || scale_ ||
      run_status.code() != Status::Code::kUnavailable)
    return false;
  const std::vector<int> leaving = LostWorkersOnly(c);
  const int from = o_.roles.num_workers();
  const int to = from - static_cast<int>(leaving.size());
  const std::string why =
      leaving.empty()       ? "a node other than a worker was lost"
      : to < o_.min_workers ? fmt::format(
                                  "{} workers would be left, fewer than "
                                  "cluster.min_workers = {}",
                                  to, o_.min_workers)
      : checkpoints_.last_step() < 0 ? "this life wrote no checkpoint yet"
                                     : "";
  if (!why.empty()) {
    LogWarning("cluster.leave_on_loss: the run stops: {}", why);
    return false;
  }
  ScaleRequest drain;
  drain.workers = to;
  drain.asked_unix = UnixNow();
  drain.leaving = leaving;
  const int64_t step = checkpoints_.last_step();
  Status st =
      AppendMembership(run_dir_.path(), {{"event", "lost"},
                                         {"from", from},
                                         {"to", to},
                                         {"step", step},
                                         {"leaving", leaving},
                                         {"asked_unix", drain.asked_unix}});
  if (st.ok()) st = AcceptScale(run_dir_.path(), drain, step);
  if (!st.ok()) {
    LogError("cluster.leave_on_loss: {}", st.message());
    return false;
  }
  LogWarning(
      "cluster.leave_on_loss: worker {} lost; the run goes on from step {} "
      "on {} workers",
      fmt::join(leaving, ", "), step, to);
  return true;
}

void CoordinatorRun::WriteTimeline(
    const std::vector<timeline::NodeTimeline>& nodes) {
  size_t spans = 0;
  int64_t dropped = 0;
  for (const auto& n : nodes) {
    spans += n.taken.events.size();
    dropped += n.taken.dropped;
  }
  const std::string path = run_dir_.File("timeline.json");
  const auto describe = [this](int32_t id) { return o_.roles.Describe(id); };
  Status st = WriteFileAtomic(path, ChromeTrace(nodes, describe).dump());
  if (!st.ok()) {
    LogWarning("timeline: not written: {}", st.message());
    return;
  }
  LogInfo("timeline: {} spans of {} nodes in {}{}", spans, nodes.size(), path,
          dropped > 0 ? fmt::format(" ({} older spans dropped: "
                                    "cluster.timeline_events)",
                                    dropped)
                      : "");
}

Result<ClusterSummary> CoordinatorRun::Run(
    std::unique_ptr<Transport> transport,
    std::shared_ptr<const Checkpoint> resume_from) {
  // Checkpoints (docs/design/checkpoints.md).
  if (o_.resume) {
    RETURN_IF_ERROR(
        checkpoints_.Load(/*announce=*/true, std::move(resume_from)));
  }
  CoordinatorOptions co = Options();
  RETURN_IF_ERROR(StartMetrics(co));
  Coordinator coordinator(co, std::move(transport));
  coordinator_ = &coordinator;
  coordinator.Start();
  const Status run_status = Supervise(coordinator);
  if (vanished_) {
    coordinator.Stop();
    return run_status;
  }
  // The workers may have seen the stop themselves and finished before the
  // loop above looked at it: the run was interrupted all the same.
  if (stop_ != nullptr && stop_->load()) interrupted_ = true;
  HandOverScale();
  HandOverLoss(coordinator, run_status);
  SummaryGather gather(coordinator, o_, start_, checkpoints_.prior_train_s());
  SetPhase(coordinator, RunPhase::kFinishing);
  ClusterSummary summary = gather.Gather(run_status, interrupted_);
  if (o_.timeline) WriteTimeline(gather.TakeTimelines());
  if (o_.timeline || o_.pace.on()) {
    LogInfo("stragglers (summary.json \"stragglers\"):\n{}",
            FormatStragglers(StragglerTable(summary.workers)));
  }
  if (checkpoints_.resuming()) {
    summary.resumed_from = checkpoints_.dir();
    summary.resumed_at_step = checkpoints_.step();
    AddResize(checkpoints_.resize(), summary);
  }
  if (o_.checkpoints()) summary.checkpoints_written = checkpoints_.written();
  summary.membership = ReadMembership(run_dir_.path());
  SetPhase(coordinator, run_status.ok() ? RunPhase::kDone : RunPhase::kFailed);
  Status written = run_dir_.WriteJson("summary.json", summary.ToJson());
  coordinator.Stop();
  if (run_status.ok()) RETURN_IF_ERROR(written);
  return summary;
}

}  // namespace

Status RunCoordinatorRole(RoleContext& ctx) {
  CoordinatorRun run(*ctx.config, ctx.options(), *ctx.run_dir, ctx.stop);
  ASSIGN_OR_RETURN(ClusterSummary summary,
                   run.Run(std::move(ctx.transport), ctx.resume_from));
  Status status = summary.status;
  if (ctx.summary != nullptr) *ctx.summary = std::move(summary);
  return status;
}

}  // namespace strata
