#include "coordinator/checkpoint_rounds.h"

#include <algorithm>

#include "cluster/protocol.h"
#include "common/log.h"

namespace strata {

CheckpointRounds::Started CheckpointRounds::Arrive(Message msg,
                                                   const WorkerSet& workers) {
  Started started;
  if (!write_) {
    rpc_.ReplyErrorOrLog(
        msg, Status::FailedPrecondition(
                 "the coordinator writes no checkpoints in this run"));
    return started;
  }
  MutexLock lock(&mu_);
  const bool final = msg.header.flags & kCheckpointFinal;
  if (round_ == rounds_done_ && !final &&
      msg.header.clock <= last_round_step_) {
    // Free-running workers reach a checkpoint step one after another: the
    // first one's round took the others along, and a checkpoint as far as
    // that is written. Nothing to do.
    Message skip;
    skip.header.type = MessageType::kAck;
    skip.header.clock = rounds_done_;
    lock.Unlock();
    rpc_.ReplyOrLog(msg, std::move(skip));
    return started;
  }
  if (round_ == rounds_done_) StartLocked(workers, &started);
  started.taken = true;
  started.round = round_;
  if (lockstep_) {
    const bool paused = msg.header.flags & kCheckpointPaused;
    target_ = std::max(target_, msg.header.clock + (paused && !final ? 1 : 0));
    if (final) target_ = std::min(target_, msg.header.clock);
  }
  const NodeId from = msg.header.sender;
  arrivals_.erase(from);  // a worker that caught up arrives again
  arrivals_.emplace(from, std::move(msg));
  moved_ = Clock::now();
  return started;
}

void CheckpointRounds::StartLocked(const WorkerSet& workers, Started* started) {
  ++round_;
  arrivals_.clear();
  target_ = 0;
  writing_ = false;
  stop_after_ = false;
  for (NodeId id : workers.Training())
    if (!finished_.count(id)) started->pauses.push_back(id);
}

CheckpointRounds::Started CheckpointRounds::RequestRound(
    bool stop_after, const WorkerSet& workers) {
  Started started;
  MutexLock lock(&mu_);
  if (round_ > rounds_done_) {
    if (stop_after) stop_after_ = true;
    return started;
  }
  StartLocked(workers, &started);
  stop_after_ = stop_after;
  started.round = round_;
  if (started.pauses.empty()) rounds_done_ = round_;
  return started;
}

void CheckpointRounds::MaybeRun(const WorkerSet& workers) {
  MutexLock lock(&mu_);
  MaybeRunLocked(workers);
}

void CheckpointRounds::CatchUpLocked() {
  for (auto it = arrivals_.begin(); it != arrivals_.end();) {
    if (it->second.header.clock < target_ &&
        !(it->second.header.flags & kCheckpointFinal)) {
      Message go;
      go.header.type = MessageType::kAck;
      go.header.flags = kCheckpointCatchUp;
      go.header.clock = target_;
      rpc_.ReplyOrLog(it->second, std::move(go));
      it = arrivals_.erase(it);
    } else {
      ++it;
    }
  }
}

void CheckpointRounds::MaybeRunLocked(const WorkerSet& workers) {
  if (round_ == rounds_done_ || writing_ || stopping_) return;
  // Workers in lockstep must be at one step: those behind train on to the
  // round's step (they can: a peer waiting at it has passed theirs) and
  // arrive again.
  if (lockstep_) CatchUpLocked();
  for (NodeId id : workers.Training()) {
    if (!arrivals_.count(id) && !finished_.count(id)) return;
  }
  writing_ = true;
  // The previous writer has finished its work (rounds_done_ caught up); it
  // only has to return.
  if (writer_.joinable()) writer_.join();
  for (const auto& [id, m] : arrivals_)
    last_round_step_ = std::max(last_round_step_, m.header.clock);
  writer_ = std::thread([this] { WriteRound(); });
}

void CheckpointRounds::WriteRound() {
  std::map<NodeId, Message> arrivals;
  int64_t round;
  {
    MutexLock lock(&mu_);
    arrivals.swap(arrivals_);
    round = round_;
  }
  const Status written = arrivals.empty()
                             ? Status::Cancelled("no worker is still training")
                             : write_(arrivals);
  if (!written.ok() && !arrivals.empty())
    LogWarning("coordinator: checkpoint not written: {}", written.message());
  MutexLock lock(&mu_);
  for (auto& [id, m] : arrivals) {
    if (m.header.flags & kCheckpointFinal) finished_.insert(id);
    Answer(m, round, written);
  }
  last_ok_ = written.ok();
  writing_ = false;
  rounds_done_ = round;
}

void CheckpointRounds::Answer(Message& arrival, int64_t round,
                              const Status& written) {
  Message reply;
  reply.header.type = MessageType::kAck;
  reply.header.clock = round;
  if (!written.ok()) {
    // Not an error reply: the worker goes on training (it was not its
    // fault); the reason rides along.
    reply.header.flags = kCheckpointFailed;
    const std::string why = written.message();
    reply.payloads.push_back(Buffer::CopyOf(why.data(), why.size()));
  }
  if (stop_after_) reply.header.flags |= kCheckpointStop;
  rpc_.ReplyOrLog(arrival, std::move(reply));
}

void CheckpointRounds::Nudge(Clock::time_point now, const WorkerSet& workers) {
  MutexLock lock(&mu_);
  if (!lockstep_ || round_ == rounds_done_ || writing_ || arrivals_.empty() ||
      now - moved_ < kLockstepNudge)
    return;
  int64_t top = 0;
  for (const auto& [id, m] : arrivals_) {
    if (m.header.flags & kCheckpointFinal) return;  // cannot move on
    top = std::max(top, m.header.clock);
  }
  target_ = std::max(target_, top + 1);
  moved_ = now;
  LogDebug(
      "coordinator: checkpoint round {} moves to step {} (a worker has not "
      "arrived)",
      round_, target_);
  MaybeRunLocked(workers);
}

int64_t CheckpointRounds::rounds_done() const {
  MutexLock lock(&mu_);
  return rounds_done_;
}

bool CheckpointRounds::last_ok() const {
  MutexLock lock(&mu_);
  return last_ok_;
}

void CheckpointRounds::Stop() {
  std::thread writer;
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    writer.swap(writer_);
  }
  if (writer.joinable()) writer.join();
}

}  // namespace strata
