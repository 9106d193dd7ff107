#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cluster/protocol.h"
#include "cluster/role_table.h"
#include "coordinator/barriers.h"
#include "coordinator/checkpoint_rounds.h"
#include "coordinator/membership.h"
#include "coordinator/rendezvous_store.h"
#include "coordinator/restarts.h"
#include "coordinator/run_outcome.h"
#include "transport/rpc.h"

namespace strata {

struct CoordinatorOptions {
  RoleTable roles;
  std::chrono::milliseconds heartbeat_timeout{5000};
  // The nodes' heartbeat period: nodes that went silent together are seen
  // lost up to about this far apart (a lost worker waits this long, plus
  // one look, for the server whose loss stopped it to be named instead).
  std::chrono::milliseconds heartbeat_interval{500};
  // How long a node may take to register (process start, data loading)
  // before it is declared lost; heartbeats are watched from registration on.
  std::chrono::milliseconds join_timeout{120000};
  // Said after a loss of a node that never registered, where something
  // other than the node may explain it (emulated links: a registration
  // crosses them too). Empty: nothing.
  std::string never_registered_hint;
  // Bounded staleness s for the clock table; < 0 grants every clock at once.
  int64_t staleness = -1;
  // When true (sync mode) a lost worker ends the run with an error; when
  // false the run goes on with the others. A lost server is always fatal.
  bool worker_loss_fatal = true;
  // Receives each heartbeat's status (the sender, its JSON text), on the
  // coordinator's receive thread; must be quick and thread-safe. May be null.
  std::function<void(NodeId, const std::string&)> on_status;
  // Receives a worker's metrics.jsonl line (cluster.forward_metrics: the
  // sender, the line's JSON text), on the receive thread. May be null.
  std::function<void(NodeId, const std::string&)> on_metrics_line;
  // Writes a checkpoint from the workers' arrivals (worker node id -> its
  // kCheckpointArrive) once every live worker that has not finished
  // arrived; runs on the coordinator's checkpoint thread and may Request()
  // other nodes (the servers' state). Null: arrivals are refused.
  std::function<Status(std::map<NodeId, Message>&)> on_checkpoint;
  // A lost server may be replaced (cluster.restart, free modes): the run
  // waits this long for a node to re-join under its id (`strata node --role
  // server --index j` again) before the loss becomes fatal. Zero: a lost
  // server is fatal at once.
  std::chrono::milliseconds server_restart_timeout{0};
  // A lost worker may re-join under its id (cluster.restart, free modes:
  // the run goes on without it meanwhile, as for any lost worker there).
  bool worker_restart = false;
  // cluster.min_workers (free modes): with fewer workers not lost, the run
  // waits `min_workers_wait` for replacements to re-join, then stops,
  // naming the missing ones.
  int min_workers = 1;
  std::chrono::milliseconds min_workers_wait{0};
  // Lockstep modes (sync, the collectives): workers must be at one step in
  // a checkpoint; those behind are told to catch up to the one ahead.
  bool checkpoint_lockstep = false;
  // The step of the checkpoint the run resumed from (0: none). Free-running
  // workers resume at different steps; an arrival at a checkpoint step up
  // to this one is let go at once, as one already covered by a round.
  int64_t checkpoint_resumed_step = 0;
  // The reply to a node's kRestoreRequest (payloads and clock; the type is
  // set here), on the receive thread: must be quick. Null: no payloads.
  std::function<Message(NodeId)> on_restore;
};

// The coordinator: rendezvous (nodes register their endpoints and get
// everyone else's), barriers among workers, heartbeats and failure detection
// (the message names the lost node and its role), the clock table for
// bounded staleness, checkpoint rounds, the rendezvous store of the
// collectives, replacements of lost nodes, and the end of the run. Each of
// these is a part with its own state and lock (membership.h, barriers.h,
// checkpoint_rounds.h, rendezvous_store.h, restarts.h, run_outcome.h); the
// coordinator hands each message to one short handler and, after any
// change of membership, lets every part that depends on who is there look
// again. Thread-safe. Start() spawns the receive and monitor threads;
// Stop() joins them.
class Coordinator {
 public:
  Coordinator(CoordinatorOptions options, std::unique_ptr<Transport> transport);
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  void Start();
  void Stop();
  Transport& transport() { return rpc_.transport(); }

  // Blocks until every worker reported done (OK), a fatal failure happened
  // (kUnavailable naming the lost node), or `timeout` passed
  // (kDeadlineExceeded naming the workers still running).
  Status WaitForWorkers(std::chrono::milliseconds timeout);
  // Tells every node to stop; `reason` non-empty marks it an error.
  void BroadcastShutdown(const std::string& reason);
  // Nodes declared lost so far, described ("worker 2 (node 5)").
  std::vector<std::string> LostNodes() const;
  std::vector<NodeId> LostIds() const;
  // Sends a request to a node through the coordinator's endpoint (e.g. the
  // servers' statistics at the end of a run).
  std::shared_ptr<RpcCall> Request(NodeId to, Message msg) {
    return rpc_.Request(to, std::move(msg));
  }
  // Tells the workers to end their loops now (not an error: they report
  // done as usual). Servers and the evaluator keep running.
  void StopWorkers();
  // What each worker attached to its "done" report (its metrics, as text).
  std::map<NodeId, std::string> DoneReports() const {
    return membership_.DoneReports();
  }
  // The timelines nodes sent before they left (cluster.timeline: a worker
  // sends its own with its "done"), as text (common/timeline_wire.h);
  // taken out.
  std::map<NodeId, std::string> TakeTimelines() EXCLUDES(timelines_mu_) {
    MutexLock lock(&timelines_mu_);
    return std::move(timelines_);
  }
  // When barrier 0 (every worker set up, training begins) was released;
  // the epoch of the steady clock if it has not been yet.
  std::chrono::steady_clock::time_point TrainingStart() const {
    return barriers_.TrainingStart();
  }
  // Starts a checkpoint round now (checkpoint.every_s, Ctrl-C): every live
  // worker is asked to arrive at its next step boundary. With `stop_after`
  // the workers stop training once it is written. No-op while one runs
  // (except that `stop_after` then applies to it).
  void RequestCheckpoint(bool stop_after);
  // Each replacement of a lost node so far.
  std::vector<NodeRestart> Restarts() const { return restarts_.History(); }
  // Rounds finished, and whether the last one wrote its checkpoint.
  int64_t checkpoint_rounds() const { return rounds_.rounds_done(); }
  bool last_checkpoint_ok() const { return rounds_.last_ok(); }

 private:
  using Clock = std::chrono::steady_clock;
  void Handle(Message msg);
  void OnHeartbeat(Message msg);
  void OnDone(Message msg);
  void OnCheckpointArrive(Message msg);
  void OnRestoreRequest(Message msg);
  void OnTimeline(Message msg);
  // After membership changed: every part that depends on who is there.
  void Reassess();
  void Monitor();
  // One look of the monitor at `now`.
  void Watch(Clock::time_point now, Clock::time_point started);
  // What the loss of `lost` means for the run.
  void OnLost(const LostNode& lost, Clock::time_point now);
  // Replacements that did not come in time fail the run.
  void CheckReplacements(Clock::time_point now);
  // Fewer workers than cluster.min_workers for longer than the wait fail
  // the run, naming the lost ones.
  void CheckMinWorkers(Clock::time_point now);

  const CoordinatorOptions options_;
  RpcEndpoint rpc_;
  class Restarts restarts_;
  Membership membership_;
  Barriers barriers_;
  ClockTable clocks_;
  CheckpointRounds rounds_;
  RendezvousStore store_;
  RunOutcome outcome_;
  Mutex timelines_mu_;
  std::map<NodeId, std::string> timelines_ GUARDED_BY(timelines_mu_);
  std::thread monitor_;
  // When the live workers fell below min_workers (the monitor's thread).
  Clock::time_point below_min_since_{};
};

}  // namespace strata
