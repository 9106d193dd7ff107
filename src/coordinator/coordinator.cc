#include "coordinator/coordinator.h"

#include <algorithm>

#include "common/log.h"
#include "common/timeline.h"
#include "coordinator/notify.h"

namespace strata {

namespace {

MembershipOptions MembershipOf(const CoordinatorOptions& o) {
  MembershipOptions m;
  m.roles = o.roles;
  m.server_restart_timeout = o.server_restart_timeout;
  m.worker_restart = o.worker_restart;
  return m;
}

}  // namespace

Coordinator::Coordinator(CoordinatorOptions options,
                         std::unique_ptr<Transport> transport)
    : options_(std::move(options)),
      rpc_(std::move(transport), [this](Message m) { Handle(std::move(m)); }),
      membership_(MembershipOf(options_), rpc_, restarts_),
      barriers_(rpc_),
      clocks_(rpc_, options_.staleness),
      rounds_(rpc_, options_.on_checkpoint, options_.checkpoint_lockstep,
              options_.checkpoint_resumed_step),
      store_(rpc_) {}

Coordinator::~Coordinator() { Stop(); }

void Coordinator::Start() {
  rpc_.Start();
  monitor_ = std::thread([this] { Monitor(); });
}

void Coordinator::Stop() {
  if (!outcome_.Stop()) return;
  // No round starts from here on (the monitor may still look once).
  rounds_.Stop();
  if (monitor_.joinable()) monitor_.join();
  rpc_.Stop();
}

// One short handler per message type; every message first counts as a
// sign of life.
void Coordinator::Handle(Message msg) {
  const Clock::time_point prev_seen = membership_.Seen(msg.header.sender);
  switch (msg.header.type) {
    case MessageType::kStoreSet:
      return store_.HandleSet(std::move(msg));
    case MessageType::kStoreGet:
      return store_.HandleGet(std::move(msg));
    case MessageType::kCheckpointArrive:
      return OnCheckpointArrive(std::move(msg));
    case MessageType::kRestoreRequest:
      return OnRestoreRequest(std::move(msg));
    case MessageType::kRegister:
      return membership_.Register(std::move(msg), prev_seen);
    case MessageType::kHeartbeat:
      return OnHeartbeat(std::move(msg));
    case MessageType::kBarrier:
      // Kept first, then released against membership as it is now: a
      // worker lost meanwhile is not waited for.
      barriers_.Arrive(std::move(msg));
      return barriers_.Release(membership_.Workers());
    case MessageType::kClock:
      clocks_.Request(std::move(msg));
      return clocks_.Grant(membership_.Workers());
    case MessageType::kShutdown:
      return OnDone(std::move(msg));
    case MessageType::kTimelineRequest:
      return OnTimeline(std::move(msg));
    case MessageType::kMetricsLine:
      if (options_.on_metrics_line && !msg.payloads.empty())
        options_.on_metrics_line(msg.header.sender, msg.payloads[0].ToString());
      return;
    default:
      LogWarning("coordinator: ignoring unexpected {} from {}",
                 MessageTypeName(msg.header.type),
                 options_.roles.Describe(msg.header.sender));
  }
}

void Coordinator::OnHeartbeat(Message msg) {
  if (options_.on_status && !msg.payloads.empty())
    options_.on_status(msg.header.sender, msg.payloads[0].ToString());
  if (msg.header.request_id != 0) {
    Message ack;
    ack.header.type = MessageType::kAck;
    // The node estimates its clock offset from this stamp.
    ack.header.clock = timeline::NowNs();
    rpc_.ReplyOrLog(msg, std::move(ack));
  }
}

void Coordinator::OnTimeline(Message msg) {
  {
    MutexLock lock(&timelines_mu_);
    timelines_[msg.header.sender] =
        msg.payloads.empty() ? std::string() : msg.payloads[0].ToString();
  }
  Message ack;
  ack.header.type = MessageType::kAck;
  rpc_.ReplyOrLog(msg, std::move(ack));
}

void Coordinator::OnDone(Message msg) {
  const NodeId from = msg.header.sender;
  membership_.MarkDone(from, msg.payloads.empty() ? "" : ErrorText(msg),
                       (msg.header.flags & kShutdownLeaving) != 0);
  // A finished worker never holds anyone back.
  clocks_.Finished(from);
  const WorkerSet workers = membership_.Workers();
  clocks_.Grant(workers);
  barriers_.Release(workers);
  rounds_.MaybeRun(workers);
  outcome_.MaybeFinish(workers, options_.roles.num_workers());
}

void Coordinator::OnCheckpointArrive(Message msg) {
  const NodeId from = msg.header.sender;
  const int64_t clock = msg.header.clock;
  const CheckpointRounds::Started s =
      rounds_.Arrive(std::move(msg), membership_.Workers());
  if (!s.taken) return;
  // The worker has done `clock` iterations: that is its clock too (a worker
  // waiting in a round must not hold the others back, ssp).
  clocks_.Advance(from, clock);
  // Kept first, then looked at against membership as it is now (a worker
  // lost while this one arrived is not waited for).
  const WorkerSet workers = membership_.Workers();
  rounds_.MaybeRun(workers);
  clocks_.Grant(workers);
  NotifyNodes(rpc_, options_.roles, s.pauses, MessageType::kCheckpointPause,
              s.round);
}

void Coordinator::OnRestoreRequest(Message msg) {
  Message reply =
      options_.on_restore ? options_.on_restore(msg.header.sender) : Message{};
  reply.header.type = MessageType::kAck;
  rpc_.ReplyOrLog(msg, std::move(reply));
}

void Coordinator::Reassess() {
  const WorkerSet workers = membership_.Workers();
  clocks_.Grant(workers);
  barriers_.Release(workers);
  outcome_.MaybeFinish(workers, options_.roles.num_workers());
}

void Coordinator::Monitor() {
  const auto period =
      std::max(std::chrono::milliseconds(10), options_.heartbeat_timeout / 10);
  const auto started = Clock::now();
  while (!outcome_.WaitForStop(period)) {
    const auto now = Clock::now();
    CheckReplacements(now);
    CheckMinWorkers(now);
    rounds_.Nudge(now, membership_.Workers());
    for (const LostNode& lost : membership_.FindLost(
             now, started, options_.heartbeat_timeout, options_.join_timeout)) {
      OnLost(lost, now);
    }
    outcome_.PromoteWorkerLoss(now, options_.heartbeat_interval + period);
    const Clock::duration grace =
        options_.worker_restart && options_.server_restart_timeout.count() > 0
            ? std::max<Clock::duration>(options_.heartbeat_timeout,
                                        options_.server_restart_timeout)
            : Clock::duration(options_.heartbeat_timeout);
    outcome_.EveryWorkerLost(membership_.Workers(),
                             options_.roles.num_workers(), now, grace);
  }
}

void Coordinator::CheckReplacements(Clock::time_point now) {
  for (NodeId id : restarts_.Overdue(now, options_.server_restart_timeout)) {
    if (outcome_.failed()) return;
    const std::string what = fmt::format(
        "lost {}: no replacement re-joined within {:.0f} s "
        "(cluster.restart_timeout_s)",
        options_.roles.Describe(id),
        options_.server_restart_timeout.count() / 1000.0);
    LogError("coordinator: {}; stopping the run", what);
    outcome_.Fail(what);
  }
}

void Coordinator::CheckMinWorkers(Clock::time_point now) {
  const WorkerSet workers = membership_.Workers();
  const int live = static_cast<int>(workers.live.size());
  // Every worker lost is its own case (RunOutcome::EveryWorkerLost, which
  // first waits for a lost server to name the cause); the default minimum
  // of 1 changes nothing.
  if (live == 0 || live >= options_.min_workers || outcome_.failed()) {
    below_min_since_ = Clock::time_point{};
    return;
  }
  if (below_min_since_ == Clock::time_point{}) {
    below_min_since_ = now;
    if (options_.min_workers_wait.count() > 0) {
      LogWarning(
          "coordinator: {} workers left, fewer than cluster.min_workers = {}; "
          "waiting up to {:.0f} s for replacements",
          live, options_.min_workers,
          options_.min_workers_wait.count() / 1000.0);
    }
  }
  if (now - below_min_since_ < options_.min_workers_wait) return;
  std::string missing;
  for (NodeId id : membership_.LostIds()) {
    Role role;
    int index;
    if (!options_.roles.RoleOf(id, &role, &index).ok() || role != Role::kWorker)
      continue;
    missing += (missing.empty() ? "" : ", ") + options_.roles.Describe(id);
  }
  const std::string what = fmt::format(
      "{} workers left, fewer than cluster.min_workers = {} (lost: {})", live,
      options_.min_workers, missing);
  LogError("coordinator: {}; stopping the run", what);
  outcome_.Fail(what);
}

void Coordinator::OnLost(const LostNode& lost, Clock::time_point now) {
  const RoleTable& roles = options_.roles;
  // Data servers hand a lost worker's batches to the others.
  std::vector<NodeId> data;
  for (NodeId d : roles.Ids(Role::kData))
    if (d != lost.id && !membership_.IsLost(d)) data.push_back(d);
  NotifyNodes(rpc_, roles, data, MessageType::kNodeLost, lost.id);
  const auto timeout =
      lost.joined ? options_.heartbeat_timeout : options_.join_timeout;
  std::string what = fmt::format(
      lost.joined
          ? "lost {}: no message for {:.1f} s (heartbeat timeout {:.1f} s)"
          : "lost {}: never registered in {:.1f} s (join timeout {:.1f} s)",
      roles.Describe(lost.id), lost.silent_s, timeout.count() / 1000.0);
  if (!lost.joined && !options_.never_registered_hint.empty())
    what += "; " + options_.never_registered_hint;
  if (lost.awaited) {
    LogWarning(
        "coordinator: {}; waiting up to {:.0f} s for its replacement "
        "(cluster.restart)",
        what, options_.server_restart_timeout.count() / 1000.0);
    return;
  }
  if (lost.role == Role::kEvaluator) {
    LogWarning("coordinator: {}; training goes on without evaluation{}", what,
               options_.worker_restart
                   ? " until a replacement re-joins (cluster.restart)"
                   : "");
    return;
  }
  const bool worker = lost.role == Role::kWorker;
  if (worker && options_.worker_loss_fatal) {
    // A server that vanished fails its workers' pushes at once, and their
    // heartbeats can stop a little before its own last one is overdue: wait
    // one heartbeat period (and a look) for such a loss to name the cause
    // before this one stops the run (PromoteWorkerLoss).
    LogError("coordinator: {}; stopping the run", what);
    outcome_.FailOnWorkerLoss(what, now);
  } else if (!worker) {
    LogError("coordinator: {}; stopping the run", what);
    outcome_.Fail(what);
  } else {
    LogWarning("coordinator: {}; the run goes on with the other workers", what);
    Reassess();
  }
  // A round waiting for the lost worker goes on without it (the writer
  // then refuses to write a checkpoint that lacks a worker).
  if (worker) rounds_.MaybeRun(membership_.Workers());
}

void Coordinator::RequestCheckpoint(bool stop_after) {
  const CheckpointRounds::Started s =
      rounds_.RequestRound(stop_after, membership_.Workers());
  NotifyNodes(rpc_, options_.roles, s.pauses, MessageType::kCheckpointPause,
              s.round);
}

Status Coordinator::WaitForWorkers(std::chrono::milliseconds timeout) {
  Status st = outcome_.WaitForEnd(timeout);
  if (st.code() != Status::Code::kDeadlineExceeded) return st;
  std::string running;
  for (NodeId id : membership_.Workers().Training())
    running += (running.empty() ? "" : ", ") + options_.roles.Describe(id);
  return Status::DeadlineExceeded("workers still running after {} s: {}",
                                  timeout.count() / 1000.0, running);
}

void Coordinator::BroadcastShutdown(const std::string& reason) {
  for (NodeId id : membership_.Reachable()) {
    Message m;
    m.header.type = MessageType::kShutdown;
    if (!reason.empty()) {
      m.header.flags |= kShutdownError;
      m.payloads.push_back(Buffer::CopyOf(reason.data(), reason.size()));
    }
    Status sent = rpc_.Send(id, std::move(m));
    if (!sent.ok())
      LogDebug("coordinator: shutdown to {} not sent: {}",
               options_.roles.Describe(id), sent.message());
  }
}

void Coordinator::StopWorkers() {
  for (int i = 0; i < options_.roles.num_workers(); ++i) {
    Message m;
    m.header.type = MessageType::kShutdown;
    m.header.flags |= kShutdownStopTraining;
    Status sent = rpc_.Send(options_.roles.WorkerId(i), std::move(m));
    if (!sent.ok())
      LogDebug("coordinator: stop to worker {} not sent: {}", i,
               sent.message());
  }
}

std::vector<std::string> Coordinator::LostNodes() const {
  std::vector<std::string> out;
  for (NodeId id : membership_.LostIds())
    out.push_back(options_.roles.Describe(id));
  return out;
}

std::vector<NodeId> Coordinator::LostIds() const {
  return membership_.LostIds();
}

}  // namespace strata
