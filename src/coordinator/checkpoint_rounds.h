#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "coordinator/worker_set.h"
#include "transport/rpc.h"

namespace strata {

// The coordinator's checkpoint rounds (cluster/protocol.h,
// docs/design/checkpoints.md): a round starts when a worker arrives
// (kCheckpointArrive) or when asked (RequestRound: checkpoint.every_s,
// Ctrl-C); every other live worker still training is asked to arrive at its
// next step boundary (kCheckpointPause); once all arrived, a thread of the
// round writes the checkpoint (`write`, which may ask other nodes for their
// state) and lets them go. In lockstep modes (sync, the collectives) the
// workers must meet at one step: those behind train on to the round's step
// and arrive again. Thread-safe; replies go through `rpc`.
class CheckpointRounds {
 public:
  using Clock = std::chrono::steady_clock;
  using Write = std::function<Status(std::map<NodeId, Message>&)>;

  // `write` null: arrivals are refused. `resumed_step`: the step of the
  // checkpoint the run resumed from (arrivals up to it are covered).
  CheckpointRounds(RpcEndpoint& rpc, Write write, bool lockstep,
                   int64_t resumed_step)
      : rpc_(rpc),
        write_(std::move(write)),
        lockstep_(lockstep),
        last_round_step_(resumed_step) {}
  ~CheckpointRounds() { Stop(); }

  // What an arrival or a request did: whether the arrival was taken into a
  // round (false: answered at once), and the workers to ask to arrive at
  // `round` (kCheckpointPause, sent by the caller without any lock). An
  // arrival is only kept: the caller then calls MaybeRun with membership as
  // it is after the arrival.
  struct Started {
    bool taken = false;
    int64_t round = 0;
    std::vector<NodeId> pauses;
  };
  Started Arrive(Message msg, const WorkerSet& workers) EXCLUDES(mu_);
  // Starts a round now; with `stop_after` the workers stop once it is
  // written. No-op while one runs (except that `stop_after` then applies).
  Started RequestRound(bool stop_after, const WorkerSet& workers) EXCLUDES(mu_);
  // Writes the round once every live worker still training arrived (a lost
  // or finished worker is not waited for).
  void MaybeRun(const WorkerSet& workers) EXCLUDES(mu_);
  // Lockstep: a round that has not moved for a while is taken a step later
  // (a worker that saw the pause late may be inside the round's step,
  // waiting for the peers that arrived at it).
  void Nudge(Clock::time_point now, const WorkerSet& workers) EXCLUDES(mu_);
  int64_t rounds_done() const EXCLUDES(mu_);
  bool last_ok() const EXCLUDES(mu_);
  // No round starts any more; waits for the writer.
  void Stop() EXCLUDES(mu_);

 private:
  static constexpr std::chrono::milliseconds kLockstepNudge{500};
  void StartLocked(const WorkerSet& workers, Started* started) REQUIRES(mu_);
  void MaybeRunLocked(const WorkerSet& workers) REQUIRES(mu_);
  // The lockstep catch-up: those behind the round's step train on to it.
  void CatchUpLocked() REQUIRES(mu_);
  // On the writer thread: writes the round and answers its arrivals.
  void WriteRound() EXCLUDES(mu_);
  void Answer(Message& arrival, int64_t round, const Status& written)
      REQUIRES(mu_);

  RpcEndpoint& rpc_;
  const Write write_;
  const bool lockstep_;
  mutable Mutex mu_;
  // The round in progress (round_ > rounds_done_): the workers' arrivals,
  // whether the writer runs, whether to stop after it.
  int64_t round_ GUARDED_BY(mu_) = 0;
  int64_t rounds_done_ GUARDED_BY(mu_) = 0;
  std::map<NodeId, Message> arrivals_ GUARDED_BY(mu_);
  bool writing_ GUARDED_BY(mu_) = false;
  bool stop_after_ GUARDED_BY(mu_) = false;
  bool last_ok_ GUARDED_BY(mu_) = false;
  bool stopping_ GUARDED_BY(mu_) = false;
  // Workers whose final arrival was answered: they arrive no more, and a
  // later round does not wait for them (a gossip worker that finished
  // waits for its peers' last models, not in a round).
  std::set<NodeId> finished_ GUARDED_BY(mu_);
  // The furthest step a worker had reached in a round so far.
  int64_t last_round_step_ GUARDED_BY(mu_) = 0;
  // Lockstep: the step every worker of the round must arrive at, and when
  // the round last moved (an arrival, a catch-up).
  int64_t target_ GUARDED_BY(mu_) = 0;
  Clock::time_point moved_ GUARDED_BY(mu_){};
  // The last round's writer (joined before the next one starts).
  std::thread writer_ GUARDED_BY(mu_);
};

}  // namespace strata
