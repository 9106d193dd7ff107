#include "cluster/coordinator.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "common/log.h"

namespace strata {

using Clock = std::chrono::steady_clock;

Coordinator::Coordinator(CoordinatorOptions options,
                         std::unique_ptr<Transport> transport)
    : options_(options),
      rpc_(std::move(transport), [this](Message m) { Handle(std::move(m)); }),
      last_round_step_(options_.checkpoint_resumed_step) {}

Coordinator::~Coordinator() { Stop(); }

void Coordinator::Start() {
  rpc_.Start();
  monitor_ = std::thread([this] { Monitor(); });
}

void Coordinator::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (monitor_.joinable()) monitor_.join();
  if (writer_.joinable()) writer_.join();
  rpc_.Stop();
}

std::vector<NodeId> Coordinator::LiveWorkersLocked() const {
  std::vector<NodeId> live;
  for (int i = 0; i < options_.roles.num_workers(); ++i) {
    NodeId id = options_.roles.WorkerId(i);
    if (!lost_.count(id)) live.push_back(id);
  }
  return live;
}

int64_t Coordinator::MinClock() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t m = std::numeric_limits<int64_t>::max();
  for (NodeId id : LiveWorkersLocked()) {
    auto it = clocks_.find(id);
    m = std::min(m, it == clocks_.end() ? 0 : it->second);
  }
  return m;
}

void Coordinator::Handle(Message msg) {
  const NodeId from = msg.header.sender;
  std::unique_lock<std::mutex> lock(mu_);
  // When `from` was heard from before this message (a replacement's
  // registration: when its predecessor went silent).
  const auto prev_seen =
      last_seen_.count(from) ? last_seen_[from] : Clock::now();
  last_seen_[from] = Clock::now();
  if (msg.header.type == kStoreSet || msg.header.type == kStoreGet) {
    HandleStore(std::move(msg), lock);
    return;
  }
  if (msg.header.type == kCheckpointArrive) {
    if (!options_.on_checkpoint) {
      lock.unlock();
      rpc_.ReplyErrorOrLog(
          msg, Status::FailedPrecondition(
                   "the coordinator writes no checkpoints in this run"));
      return;
    }
    if (round_ == rounds_done_ && !(msg.header.flags & kCheckpointFinal) &&
        msg.header.clock <= last_round_step_) {
      // Free-running workers reach a checkpoint step one after another: the
      // first one's round took the others along, and a checkpoint as far as
      // that is written. Nothing to do.
      Message skip;
      skip.header.type = MessageType::kAck;
      skip.header.clock = rounds_done_;
      lock.unlock();
      rpc_.ReplyOrLog(msg, std::move(skip));
      return;
    }
    std::vector<NodeId> pauses;
    if (round_ == rounds_done_) StartRoundLocked(&pauses);
    const int64_t round = round_;
    // The worker has done `clock` iterations: that is its clock too (a
    // worker waiting in a round must not hold the others back, ssp).
    int64_t& clock = clocks_[from];
    clock = std::max(clock, msg.header.clock);
    GrantClocksLocked();
    if (options_.checkpoint_lockstep) {
      const bool final = msg.header.flags & kCheckpointFinal;
      const bool paused = msg.header.flags & kCheckpointPaused;
      round_target_ = std::max(round_target_,
                               msg.header.clock + (paused && !final ? 1 : 0));
      if (final) round_target_ = std::min(round_target_, msg.header.clock);
    }
    arrivals_.erase(from);  // a worker that caught up arrives again
    arrivals_.emplace(from, std::move(msg));
    round_moved_ = Clock::now();
    MaybeRunRoundLocked();
    lock.unlock();
    Notify(pauses, kCheckpointPause, round);
    return;
  }
  if (msg.header.type == kRestoreRequest) {
    lock.unlock();
    Message reply = options_.on_restore ? options_.on_restore(from) : Message{};
    reply.header.type = MessageType::kAck;
    rpc_.ReplyOrLog(msg, std::move(reply));
    return;
  }
  switch (msg.header.type) {
    case MessageType::kRegister: {
      if ((msg.header.flags & kRegisterConnected) && connected_done_) {
        // A replacement finished connecting: the others move to it and
        // send it again what its predecessor never answered.
        auto re = rejoining_.find(from);
        if (re != rejoining_.end()) {
          restarts_.push_back({options_.roles.Describe(from), re->second});
          rejoining_.erase(re);
        }
        const std::string endpoint = endpoints_[from];
        std::vector<NodeId> others;
        for (const auto& [id, ep] : endpoints_) {
          if (id != from && !lost_.count(id)) others.push_back(id);
        }
        lock.unlock();
        Role role;
        int index;
        if (options_.roles.RoleOf(from, &role, &index).ok() &&
            role == Role::kWorker) {
          // The data servers take back what its predecessor had leased
          // (they may not have been told it was lost), before it asks.
          Notify(options_.roles.Ids(Role::kData), kNodeLost, from);
        }
        Notify(others, kNodeRejoined, from, endpoint);
        Message reply;
        reply.header.type = MessageType::kRegisterReply;
        rpc_.ReplyOrLog(msg, std::move(reply));
        LogWarning("coordinator: {} re-joined at {}; the run goes on",
                   options_.roles.Describe(from), endpoint);
        return;
      }
      if (msg.header.flags & kRegisterConnected) {
        waiting_connected_.push_back(std::move(msg));
        if (static_cast<int>(waiting_connected_.size()) ==
            options_.roles.num_nodes() - 1) {
          std::vector<Message> waiting;
          waiting.swap(waiting_connected_);
          for (Message& w : waiting) {
            Message reply;
            reply.header.type = MessageType::kRegisterReply;
            rpc_.ReplyOrLog(w, std::move(reply));
          }
          connected_done_ = true;
        }
        return;
      }
      std::string endpoint(
          reinterpret_cast<const char*>(
              msg.payloads.empty() ? nullptr : msg.payloads[0].data()),
          msg.payloads.empty() ? 0 : msg.payloads[0].size());
      // Connect back first: even a refusal needs a route to the node.
      if (!endpoint.empty()) {
        Status st = rpc_.transport().Connect(from, endpoint);
        if (!st.ok()) {
          LogWarning("coordinator: cannot connect back to {} at {}: {}",
                     options_.roles.Describe(from), endpoint, st.ToString());
        }
      }
      Role role;
      int index;
      if (!options_.roles.RoleOf(from, &role, &index).ok() ||
          endpoint.empty()) {
        lock.unlock();
        rpc_.ReplyErrorOrLog(
            msg,
            Status::InvalidArgument(
                "registration from node {} with endpoint '{}' does not fit "
                "this cluster ({} nodes)",
                from, endpoint, options_.roles.num_nodes()));
        return;
      }
      if (msg.payloads.size() > 1) {
        // Run facts: every node that sends them must agree (the same model
        // and data everywhere).
        std::string facts(reinterpret_cast<const char*>(msg.payloads[1].data()),
                          msg.payloads[1].size());
        nlohmann::json parsed = nlohmann::json::parse(facts, nullptr, false);
        if (parsed.is_discarded() || !parsed.is_object()) {
          lock.unlock();
          rpc_.ReplyErrorOrLog(
              msg, Status::InvalidArgument(
                       "{} registered with malformed run facts '{}'",
                       options_.roles.Describe(from), facts));
          return;
        }
        // Nodes may announce different parts of the facts (workers the
        // model, data servers the data): the union is handed out, and a
        // key two nodes announce must have the same value.
        nlohmann::json merged = run_facts_.empty()
                                    ? nlohmann::json::object()
                                    : nlohmann::json::parse(run_facts_);
        for (auto it = parsed.begin(); it != parsed.end(); ++it) {
          auto have = merged.find(it.key());
          if (have != merged.end() && *have != it.value()) {
            lock.unlock();
            rpc_.ReplyErrorOrLog(
                msg, Status::InvalidArgument(
                         "{} disagrees with {} about the run: {} vs {} "
                         "(the same config and data on every node?)",
                         options_.roles.Describe(from),
                         options_.roles.Describe(run_facts_from_),
                         parsed.dump(), run_facts_));
            return;
          }
          merged[it.key()] = it.value();
        }
        if (run_facts_.empty()) run_facts_from_ = from;
        run_facts_ = merged.dump();
      }
      if (rendezvous_done_) {
        // A node registering after the rendezvous: a replacement for a
        // lost server, or a stranger.
        // A server registering again is its replacement, even before its
        // predecessor's silence was noticed (a node never registers twice).
        auto waiting = replacing_.find(from);
        const bool replaceable =
            waiting != replacing_.end() ||
            (role == Role::kServer &&
             options_.server_restart_timeout.count() > 0) ||
            (role == Role::kWorker && options_.worker_restart &&
             !done_.count(from));
        if (!replaceable) {
          lock.unlock();
          rpc_.ReplyErrorOrLog(
              msg, Status::FailedPrecondition(
                       "{} registered again, but it is not a lost server the "
                       "run waits to replace (cluster.restart)",
                       options_.roles.Describe(from)));
          return;
        }
        const auto since =
            waiting != replacing_.end() ? waiting->second : prev_seen;
        rejoining_[from] =
            std::chrono::duration<double>(Clock::now() - since).count();
        if (waiting != replacing_.end()) replacing_.erase(waiting);
        lost_.erase(from);
        endpoints_[from] = endpoint;
        const std::string text = ClusterMapLocked();
        lock.unlock();
        Message reply;
        reply.header.type = MessageType::kRegisterReply;
        reply.payloads.push_back(Buffer::CopyOf(text.data(), text.size()));
        rpc_.ReplyOrLog(msg, std::move(reply));
        return;
      }
      endpoints_[from] = endpoint;
      waiting_register_.push_back(std::move(msg));
      if (static_cast<int>(endpoints_.size()) ==
          options_.roles.num_nodes() - 1) {
        const std::string text = ClusterMapLocked();
        std::vector<Message> waiting;
        waiting.swap(waiting_register_);
        for (Message& w : waiting) {
          Message reply;
          reply.header.type = MessageType::kRegisterReply;
          reply.payloads.push_back(Buffer::CopyOf(text.data(), text.size()));
          rpc_.ReplyOrLog(w, std::move(reply));
        }
        LogDebug("coordinator: all {} nodes registered",
                 options_.roles.num_nodes() - 1);
        rendezvous_done_ = true;
      }
      return;
    }
    case MessageType::kHeartbeat:
      lock.unlock();
      if (options_.on_status && !msg.payloads.empty()) {
        const Buffer& b = msg.payloads[0];
        options_.on_status(
            msg.header.sender,
            std::string(reinterpret_cast<const char*>(b.data()), b.size()));
      }
      if (msg.header.request_id != 0) {
        Message ack;
        ack.header.type = MessageType::kAck;
        rpc_.ReplyOrLog(msg, std::move(ack));
      }
      return;
    case MessageType::kBarrier:
      if (msg.header.clock <= released_barrier_) {
        // A replacement worker passing a barrier the others passed long
        // ago (cluster.restart).
        Message release;
        release.header.type = MessageType::kBarrierRelease;
        release.header.clock = msg.header.clock;
        rpc_.ReplyOrLog(msg, std::move(release));
        return;
      }
      barriers_[msg.header.clock].push_back(std::move(msg));
      ReleaseBarriersLocked();
      return;
    case MessageType::kClock:
      clocks_[from] = msg.header.clock;
      waiting_clocks_.push_back(std::move(msg));
      GrantClocksLocked();
      return;
    case MessageType::kShutdown:
      done_.insert(from);
      if (!msg.payloads.empty()) done_reports_[from] = ErrorText(msg);
      clocks_[from] =
          std::numeric_limits<int64_t>::max() / 2;  // never holds anyone back
      GrantClocksLocked();
      ReleaseBarriersLocked();
      MaybeRunRoundLocked();
      MaybeFinishLocked();
      return;
    default:
      LogWarning("coordinator: ignoring unexpected {} from {}",
                 MessageTypeName(msg.header.type),
                 options_.roles.Describe(from));
  }
}

void Coordinator::GrantClocksLocked() {
  int64_t min_clock = std::numeric_limits<int64_t>::max();
  for (NodeId id : LiveWorkersLocked()) {
    auto it = clocks_.find(id);
    min_clock = std::min(min_clock, it == clocks_.end() ? 0 : it->second);
  }
  std::vector<Message> still;
  for (Message& m : waiting_clocks_) {
    const int64_t c = m.header.clock;
    if (options_.staleness < 0 || c - min_clock <= options_.staleness) {
      Message grant;
      grant.header.type = MessageType::kAck;
      grant.header.clock = min_clock;
      rpc_.ReplyOrLog(m, std::move(grant));
    } else {
      still.push_back(std::move(m));
    }
  }
  waiting_clocks_.swap(still);
}

void Coordinator::ReleaseBarriersLocked() {
  const std::vector<NodeId> live = LiveWorkersLocked();
  for (auto it = barriers_.begin(); it != barriers_.end();) {
    std::set<NodeId> arrived;
    for (const Message& m : it->second) arrived.insert(m.header.sender);
    bool all = true;
    for (NodeId id : live) {
      if (!arrived.count(id) && !done_.count(id)) all = false;
    }
    if (!all) {
      ++it;
      continue;
    }
    if (it->first == 0 &&
        training_start_ == std::chrono::steady_clock::time_point{}) {
      training_start_ = Clock::now();
    }
    for (Message& m : it->second) {
      Message release;
      release.header.type = MessageType::kBarrierRelease;
      release.header.clock = it->first;
      rpc_.ReplyOrLog(m, std::move(release));
    }
    released_barrier_ = std::max(released_barrier_, it->first);
    it = barriers_.erase(it);
  }
}

void Coordinator::MaybeFinishLocked() {
  const std::vector<NodeId> live = LiveWorkersLocked();
  for (NodeId id : live) {
    if (!done_.count(id)) return;
  }
  if (live.empty() && options_.roles.num_workers() > 0) {
    // Every worker was lost before any finished: the run did not finish.
    // The Monitor stops it after a grace period in which the loss of
    // another role (usually what stopped the workers, e.g. a server they
    // pushed to) is noticed and named, or a replacement re-joins.
    if (every_worker_lost_ == Clock::time_point{}) {
      every_worker_lost_ = Clock::now();
    }
    return;
  }
  finished_ = true;
  cv_.notify_all();
}

void Coordinator::Monitor() {
  const auto period =
      std::max(std::chrono::milliseconds(10), options_.heartbeat_timeout / 10);
  std::unique_lock<std::mutex> lock(mu_);
  const auto started = Clock::now();
  while (!stopping_) {
    cv_.wait_for(lock, period, [&] { return stopping_; });
    if (stopping_) break;
    const auto now = Clock::now();
    for (const auto& [id, since] : replacing_) {
      if (now - since <= options_.server_restart_timeout || !fatal_.empty())
        continue;
      fatal_ = fmt::format(
          "lost {}: no replacement re-joined within {:.0f} s "
          "(cluster.restart_timeout_s)",
          options_.roles.Describe(id),
          options_.server_restart_timeout.count() / 1000.0);
      LogError("coordinator: {}; stopping the run", fatal_);
      cv_.notify_all();
    }
    NudgeLockstepRoundLocked(now);
    for (NodeId id = 1; id < options_.roles.num_nodes(); ++id) {
      if (lost_.count(id) || done_.count(id)) continue;
      auto it = last_seen_.find(id);
      const bool joined = endpoints_.count(id) > 0;
      auto seen = it == last_seen_.end() ? started : it->second;
      if (now - seen <=
          (joined ? options_.heartbeat_timeout : options_.join_timeout))
        continue;
      lost_.insert(id);
      Role role;
      int index;
      if (!options_.roles.RoleOf(id, &role, &index).ok()) role = Role::kWorker;
      // Data servers hand a lost worker's batches to the others.
      for (NodeId data : options_.roles.Ids(Role::kData)) {
        if (lost_.count(data) || data == id) continue;
        Message notice;
        notice.header.type = kNodeLost;
        notice.header.clock = id;
        lock.unlock();
        Status st = rpc_.Send(data, std::move(notice));
        lock.lock();
        if (!st.ok())
          LogWarning("coordinator: cannot tell {} that {} was lost: {}",
                     options_.roles.Describe(data), options_.roles.Describe(id),
                     st.message());
      }
      const double silent = std::chrono::duration<double>(now - seen).count();
      std::string what = fmt::format(
          joined
              ? "lost {}: no message for {:.1f} s (heartbeat timeout {:.1f} s)"
              : "lost {}: never registered in {:.1f} s (join timeout {:.1f} s)",
          options_.roles.Describe(id), silent,
          (joined ? options_.heartbeat_timeout : options_.join_timeout)
                  .count() /
              1000.0);
      if (role == Role::kServer && joined &&
          options_.server_restart_timeout.count() > 0) {
        replacing_[id] = now;
        LogWarning(
            "coordinator: {}; waiting up to {:.0f} s for its replacement "
            "(cluster.restart)",
            what, options_.server_restart_timeout.count() / 1000.0);
        continue;
      }
      const bool fatal = role != Role::kWorker || options_.worker_loss_fatal;
      if (role == Role::kEvaluator) {
        LogWarning("coordinator: {}; training goes on without evaluation",
                   what);
        continue;
      }
      if (fatal && role == Role::kWorker) {
        // A server that vanished fails its workers' pushes at once, and
        // their heartbeats can stop a little before its own last one is
        // overdue: wait one heartbeat period (and a look) for such a loss
        // to name the cause before this one stops the run (below).
        LogError("coordinator: {}; stopping the run", what);
        if (worker_fatal_.empty()) {
          worker_fatal_ = what;
          worker_fatal_at_ = now;
        }
      } else if (fatal) {
        LogError("coordinator: {}; stopping the run", what);
        if (fatal_.empty()) fatal_ = what;
        cv_.notify_all();
      } else {
        LogWarning("coordinator: {}; the run goes on with the other workers",
                   what);
        GrantClocksLocked();
        ReleaseBarriersLocked();
        MaybeFinishLocked();
      }
      // A round waiting for the lost worker goes on without it (the writer
      // then refuses to write a checkpoint that lacks a worker).
      if (role == Role::kWorker) MaybeRunRoundLocked();
    }
    if (!worker_fatal_.empty() && fatal_.empty() &&
        now - worker_fatal_at_ > options_.heartbeat_interval + period) {
      fatal_ = worker_fatal_;
      cv_.notify_all();
    }
    if (every_worker_lost_ != Clock::time_point{} && fatal_.empty() &&
        !finished_) {
      const auto grace =
          options_.worker_restart && options_.server_restart_timeout.count() > 0
              ? std::max(options_.heartbeat_timeout,
                         options_.server_restart_timeout)
              : options_.heartbeat_timeout;
      if (!LiveWorkersLocked().empty()) {
        every_worker_lost_ = Clock::time_point{};  // a replacement re-joined
      } else if (now - every_worker_lost_ > grace) {
        fatal_ = fmt::format(
            "lost every worker ({}) before any finished, and no other node was "
            "found lost within {:.1f} s",
            options_.roles.num_workers(),
            std::chrono::duration<double>(grace).count());
        LogError("coordinator: {}; stopping the run", fatal_);
        cv_.notify_all();
      }
    }
  }
}

std::string Coordinator::ClusterMapLocked() {
  nlohmann::json map = nlohmann::json::object();
  for (const auto& [id, ep] : endpoints_) map[std::to_string(id)] = ep;
  map["0"] = rpc_.transport().endpoint();
  if (!run_facts_.empty())
    map[kRunFactsKey] = nlohmann::json::parse(run_facts_);
  return map.dump();
}

void Coordinator::StartRoundLocked(std::vector<NodeId>* pauses) {
  ++round_;
  arrivals_.clear();
  round_target_ = 0;
  round_writing_ = false;
  round_stop_after_ = false;
  for (NodeId id : LiveWorkersLocked()) {
    if (!done_.count(id)) pauses->push_back(id);
  }
}

void Coordinator::Notify(const std::vector<NodeId>& to, MessageType type,
                         int64_t clock, const std::string& payload) {
  for (NodeId id : to) {
    Message m;
    m.header.type = type;
    m.header.clock = clock;
    if (!payload.empty())
      m.payloads.push_back(Buffer::CopyOf(payload.data(), payload.size()));
    Status sent = rpc_.Send(id, std::move(m));
    if (!sent.ok())
      LogWarning("coordinator: {} to {} not sent: {}", MessageTypeName(type),
                 options_.roles.Describe(id), sent.message());
  }
}

void Coordinator::NudgeLockstepRoundLocked(Clock::time_point now) {
  // A lockstep worker that saw the pause late may be inside the exchange of
  // the round's step already, waiting for the peers that arrived at it:
  // they would wait for each other. When a round has not moved for a while,
  // the ones waiting train one step more (the late one meets them there,
  // or arrives when it sees the pause), and the round is taken a step
  // later. Nothing of the arithmetic changes.
  if (!options_.checkpoint_lockstep || round_ == rounds_done_ ||
      round_writing_ || arrivals_.empty() ||
      now - round_moved_ < kLockstepNudge)
    return;
  int64_t top = 0;
  for (const auto& [id, m] : arrivals_) {
    if (m.header.flags & kCheckpointFinal) return;  // cannot move on
    top = std::max(top, m.header.clock);
  }
  round_target_ = std::max(round_target_, top + 1);
  round_moved_ = now;
  LogDebug(
      "coordinator: checkpoint round {} moves to step {} (a worker "
      "has not arrived)",
      round_, round_target_);
  MaybeRunRoundLocked();
}

void Coordinator::MaybeRunRoundLocked() {
  if (round_ == rounds_done_ || round_writing_ || stopping_) return;
  if (options_.checkpoint_lockstep) {
    // Workers in lockstep must be at one step: those behind train on to
    // the round's step (they can: a peer waiting at it has passed theirs)
    // and arrive again.
    for (auto it = arrivals_.begin(); it != arrivals_.end();) {
      if (it->second.header.clock < round_target_ &&
          !(it->second.header.flags & kCheckpointFinal)) {
        Message go;
        go.header.type = MessageType::kAck;
        go.header.flags = kCheckpointCatchUp;
        go.header.clock = round_target_;
        rpc_.ReplyOrLog(it->second, std::move(go));
        it = arrivals_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (NodeId id : LiveWorkersLocked()) {
    if (!done_.count(id) && !arrivals_.count(id)) return;
  }
  round_writing_ = true;
  // The previous writer has finished its work (rounds_done_ caught up); it
  // only has to return.
  if (writer_.joinable()) writer_.join();
  for (const auto& [id, m] : arrivals_)
    last_round_step_ = std::max(last_round_step_, m.header.clock);
  writer_ = std::thread([this] {
    std::map<NodeId, Message> arrivals;
    int64_t round;
    {
      std::lock_guard<std::mutex> lock(mu_);
      arrivals.swap(arrivals_);
      round = round_;
    }
    Status written = arrivals.empty()
                         ? Status::Cancelled("no worker is still training")
                         : options_.on_checkpoint(arrivals);
    if (!written.ok() && !arrivals.empty())
      LogWarning("coordinator: checkpoint not written: {}", written.message());
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, m] : arrivals) {
      if (written.ok()) {
        Message done;
        done.header.type = MessageType::kAck;
        done.header.clock = round;
        if (round_stop_after_) done.header.flags = kCheckpointStop;
        rpc_.ReplyOrLog(m, std::move(done));
      } else {
        // Not an error reply: the worker goes on training (it was not its
        // fault); the reason rides along.
        Message failed;
        failed.header.type = MessageType::kAck;
        failed.header.clock = round;
        failed.header.flags = kCheckpointFailed;
        if (round_stop_after_) failed.header.flags |= kCheckpointStop;
        const std::string why = written.message();
        failed.payloads.push_back(Buffer::CopyOf(why.data(), why.size()));
        rpc_.ReplyOrLog(m, std::move(failed));
      }
    }
    last_checkpoint_ok_ = written.ok();
    round_writing_ = false;
    rounds_done_ = round;
    cv_.notify_all();
  });
}

void Coordinator::RequestCheckpoint(bool stop_after) {
  std::vector<NodeId> pauses;
  int64_t round;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (round_ > rounds_done_) {
      if (stop_after) round_stop_after_ = true;
      return;
    }
    StartRoundLocked(&pauses);
    round_stop_after_ = stop_after;
    round = round_;
    if (pauses.empty()) {
      rounds_done_ = round_;
      return;
    }
  }
  Notify(pauses, kCheckpointPause, round);
}

std::vector<NodeRestart> Coordinator::Restarts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return restarts_;
}

int64_t Coordinator::checkpoint_rounds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rounds_done_;
}

bool Coordinator::last_checkpoint_ok() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_checkpoint_ok_;
}

Status Coordinator::WaitForWorkers(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  bool ended = cv_.wait_for(
      lock, timeout, [&] { return finished_ || !fatal_.empty() || stopping_; });
  if (!fatal_.empty()) return Status::Unavailable("{}", fatal_);
  if (finished_) return Status::Ok();
  if (stopping_)
    return Status::Cancelled("coordinator stopped before the workers finished");
  (void)ended;
  std::string running;
  for (NodeId id : LiveWorkersLocked()) {
    if (!done_.count(id))
      running += (running.empty() ? "" : ", ") + options_.roles.Describe(id);
  }
  return Status::DeadlineExceeded("workers still running after {} s: {}",
                                  timeout.count() / 1000.0, running);
}

void Coordinator::BroadcastShutdown(const std::string& reason) {
  std::vector<NodeId> targets;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, ep] : endpoints_) {
      if (!lost_.count(id)) targets.push_back(id);
    }
  }
  for (NodeId id : targets) {
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
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (NodeId id : lost_) out.push_back(options_.roles.Describe(id));
  return out;
}

std::map<NodeId, std::string> Coordinator::DoneReports() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_reports_;
}

std::vector<NodeId> Coordinator::LostIds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::vector<NodeId>(lost_.begin(), lost_.end());
}

}  // namespace strata

namespace strata {

// The rendezvous store (collective/store.h): a set answers the gets that
// waited for its key.
void Coordinator::HandleStore(Message msg, std::unique_lock<std::mutex>& lock) {
  if (msg.header.type == kStoreSet) {
    if (msg.payloads.size() < 2) {
      lock.unlock();
      rpc_.ReplyErrorOrLog(
          msg, Status::InvalidArgument("store set without a value"));
      return;
    }
    const std::string key(reinterpret_cast<const char*>(msg.payloads[0].data()),
                          msg.payloads[0].size());
    const Buffer& v = msg.payloads[1];
    store_[key] =
        std::string(reinterpret_cast<const char*>(v.data()), v.size());
    std::vector<Message> ready;
    for (auto it = waiting_gets_.begin(); it != waiting_gets_.end();) {
      if (it->first == key) {
        ready.push_back(std::move(it->second));
        it = waiting_gets_.erase(it);
      } else {
        ++it;
      }
    }
    const std::string value = store_[key];
    lock.unlock();
    Message ack;
    ack.header.type = MessageType::kAck;
    rpc_.ReplyOrLog(msg, std::move(ack));
    for (Message& get : ready) {
      Message reply;
      reply.header.type = MessageType::kAck;
      reply.payloads.push_back(Buffer::CopyOf(value.data(), value.size()));
      rpc_.ReplyOrLog(get, std::move(reply));
    }
    return;
  }
  if (msg.header.type == kStoreGet) {
    if (msg.payloads.empty()) {
      lock.unlock();
      rpc_.ReplyErrorOrLog(msg,
                           Status::InvalidArgument("store get without a key"));
      return;
    }
    const std::string key(reinterpret_cast<const char*>(msg.payloads[0].data()),
                          msg.payloads[0].size());
    auto it = store_.find(key);
    if (it == store_.end()) {
      // Answered when the key is set; the caller's wait is bounded.
      waiting_gets_.emplace_back(key, std::move(msg));
      return;
    }
    Message reply;
    reply.header.type = MessageType::kAck;
    reply.payloads.push_back(
        Buffer::CopyOf(it->second.data(), it->second.size()));
    lock.unlock();
    rpc_.ReplyOrLog(msg, std::move(reply));
    return;
  }
}

}  // namespace strata

namespace strata {

std::chrono::steady_clock::time_point Coordinator::TrainingStart() const {
  std::lock_guard<std::mutex> lock(mu_);
  return training_start_;
}

}  // namespace strata
