#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cluster/roles.h"
#include "collective/store.h"
#include "transport/rpc.h"

namespace strata {

// Coordinator message conventions (beyond transport/message.h):
//   kRegister     payload 0 = the node's endpoint; the reply (sent when every
//                 node registered) has payload 0 = JSON {"<id>": endpoint}.
//   kHeartbeat    every heartbeat interval; payload 0 (optional) = the
//                 node's live counters as JSON (CoordinatorOptions::on_status).
//   kBarrier      clock = barrier number; the reply comes when every live
//                 worker reached it.
//   kClock        clock = iterations the worker completed; the reply is the
//                 permission to start the next one (bounded staleness).
//   kShutdown     worker -> coordinator: "my iterations are done"; payload 0
//                 (optional) = the worker's metrics as JSON.
//                 coordinator -> node: stop; flags kShutdownError with
//                 payload 0 = the reason.
inline constexpr uint32_t kShutdownError = 1u << 0;
// kShutdown to a worker with this flag: stop training at the next step (the
// run is being ended early, without an error); the node stays up until the
// end of the run (a decentralized worker still serves its model to the
// final evaluation).
inline constexpr uint32_t kShutdownStopTraining = 1u << 1;
// kRegister with this flag (second phase): "I have connected to every peer";
// the reply comes when every node said so, so no node sends to a peer that
// cannot answer yet.
inline constexpr uint32_t kRegisterConnected = 1u << 0;
// kRegister may carry, as payload 1, the run facts a node knows (JSON: the
// parameter count, the iteration budget); the cluster map in the reply
// holds them under this key, next to the node ids.
inline constexpr const char* kRunFactsKey = "run";
// One-way notice to the data servers: node header.clock was declared lost.
inline constexpr MessageType kNodeLost = static_cast<MessageType>(
    static_cast<uint16_t>(MessageType::kFirstUserType) + 12);

// Checkpoint rounds (docs/checkpoints.md; what a checkpoint holds is decided
// above this layer, by CoordinatorOptions::on_checkpoint):
//   kCheckpointArrive  worker -> coordinator at a step boundary: clock = the
//                      steps it has done; payloads = its state (opaque
//                      here). Flag kCheckpointFinal: its last step. The reply
//                      comes when the round is over: kAck with clock = the
//                      round, flag kCheckpointStop when the worker is to stop
//                      training there; or, in lockstep modes when others are
//                      ahead, flag kCheckpointCatchUp with clock = the step to
//                      train to and arrive at again (a worker that was
//                      asked, flag kCheckpointPaused, at step s makes the
//                      round's step s + 1: a peer may be inside step s,
//                      waiting for it). Flag kCheckpointFailed
//                      (payload 0 = why): no checkpoint was written; the
//                      worker goes on.
//   kCheckpointPause   coordinator -> worker, one-way: clock = the round;
//                      arrive at the next step boundary.
//   kRestoreRequest    node -> coordinator after it joined: the reply holds
//                      the node's state from the checkpoint the run resumes
//                      from (clock = its step), or no payloads.
inline constexpr MessageType kCheckpointArrive = static_cast<MessageType>(
    static_cast<uint16_t>(MessageType::kFirstUserType) + 40);
inline constexpr MessageType kCheckpointPause = static_cast<MessageType>(
    static_cast<uint16_t>(MessageType::kFirstUserType) + 41);
inline constexpr MessageType kRestoreRequest = static_cast<MessageType>(
    static_cast<uint16_t>(MessageType::kFirstUserType) + 42);
inline constexpr uint32_t kCheckpointFinal = 1u << 0;
inline constexpr uint32_t kCheckpointStop = 1u << 1;
inline constexpr uint32_t kCheckpointCatchUp = 1u << 2;
inline constexpr uint32_t kCheckpointFailed = 1u << 3;
// kCheckpointArrive with this flag: the worker came because it was asked
// (kCheckpointPause), not at a step of its own schedule.
inline constexpr uint32_t kCheckpointPaused = 1u << 4;

// Coordinator -> every other node, one-way, when a restarted node re-joined
// (CoordinatorOptions::server_restart_timeout): clock = its node id,
// payload 0 = its new endpoint. A node connects to it there and sends
// again the requests it was still waiting on (RpcEndpoint::Resend).
inline constexpr MessageType kNodeRejoined = static_cast<MessageType>(
    static_cast<uint16_t>(MessageType::kFirstUserType) + 13);

// A lost node replaced while the run went on (cluster.restart).
struct NodeRestart {
  std::string node;   // described: "server 0 (node 1)"
  double down_s = 0;  // from its predecessor's last message to the re-join
};

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
  // Bounded staleness s for the clock table; < 0 grants every clock at once.
  int64_t staleness = -1;
  // When true (sync mode) a lost worker ends the run with an error; when
  // false the run goes on with the others. A lost server is always fatal.
  bool worker_loss_fatal = true;
  // Receives each heartbeat's status (the sender, its JSON text), on the
  // coordinator's receive thread; must be quick and thread-safe. May be null.
  std::function<void(NodeId, const std::string&)> on_status;
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

// The coordinator role: rendezvous (nodes register their endpoints and get
// everyone else's), barriers among workers, heartbeats and failure detection
// (the message names the lost node and its role), the clock table for
// bounded staleness, and the end of the run. Thread-safe. Start() spawns
// the receive and monitor threads; Stop() joins them.
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
  std::map<NodeId, std::string> DoneReports() const;
  // When barrier 0 (every worker set up, training begins) was released;
  // the epoch of the steady clock if it has not been yet.
  std::chrono::steady_clock::time_point TrainingStart() const;
  // Starts a checkpoint round now (cluster.every_s, Ctrl-C): every live
  // worker is asked to arrive at its next step boundary. With `stop_after`
  // the workers stop training once it is written. No-op while one runs
  // (except that `stop_after` then applies to it).
  void RequestCheckpoint(bool stop_after);
  // Each replacement of a lost node so far.
  std::vector<NodeRestart> Restarts() const;
  // Rounds finished, and whether the last one wrote its checkpoint.
  int64_t checkpoint_rounds() const;
  bool last_checkpoint_ok() const;
  // Test hook: the clock table's minimum over live workers.
  int64_t MinClock() const;

 private:
  void Handle(Message msg);
  // kStoreSet / kStoreGet; `lock` holds mu_ and may be released.
  void HandleStore(Message msg, std::unique_lock<std::mutex>& lock);
  void Monitor();
  // Callers hold mu_.
  void GrantClocksLocked();
  void ReleaseBarriersLocked();
  void MaybeFinishLocked();
  std::vector<NodeId> LiveWorkersLocked() const;
  // The cluster map a registration's reply carries (JSON text: every
  // node's endpoint and the run facts).
  std::string ClusterMapLocked();
  // Checkpoint rounds. Callers hold mu_; `pauses` gets the workers to send
  // kCheckpointPause to (after unlocking).
  void StartRoundLocked(std::vector<NodeId>* pauses);
  void MaybeRunRoundLocked();
  void NudgeLockstepRoundLocked(std::chrono::steady_clock::time_point now);
  static constexpr std::chrono::milliseconds kLockstepNudge{500};
  // One-way messages (clock, optional text payload) to each of `to`; a
  // failed send is logged. Called without mu_.
  void Notify(const std::vector<NodeId>& to, MessageType type, int64_t clock,
              const std::string& payload = "");

  const CoordinatorOptions options_;
  RpcEndpoint rpc_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<NodeId, std::string> endpoints_;  // GUARDED_BY(mu_)
  std::vector<Message> waiting_register_;    // GUARDED_BY(mu_)
  std::vector<Message> waiting_connected_;   // GUARDED_BY(mu_)
  std::map<NodeId, std::chrono::steady_clock::time_point>
      last_seen_;                                     // GUARDED_BY(mu_)
  std::set<NodeId> lost_;                             // GUARDED_BY(mu_)
  std::set<NodeId> done_;                             // GUARDED_BY(mu_)
  std::map<NodeId, std::string> done_reports_;        // GUARDED_BY(mu_)
  std::map<NodeId, int64_t> clocks_;                  // GUARDED_BY(mu_)
  std::vector<Message> waiting_clocks_;               // GUARDED_BY(mu_)
  std::map<int64_t, std::vector<Message>> barriers_;  // GUARDED_BY(mu_)
  int64_t released_barrier_ = -1;  // GUARDED_BY(mu_) the highest released
  // The rendezvous store (collective/store.h) and the gets waiting for a
  // key not set yet.
  std::map<std::string, std::string> store_;  // GUARDED_BY(mu_)
  std::vector<std::pair<std::string, Message>>
      waiting_gets_;  // GUARDED_BY(mu_)
  // Run facts (JSON text; "" until a node sent them) and who sent them.
  std::chrono::steady_clock::time_point training_start_{};  // GUARDED_BY(mu_)
  std::string run_facts_;                                   // GUARDED_BY(mu_)
  NodeId run_facts_from_ = kInvalidNodeId;                  // GUARDED_BY(mu_)
  std::string fatal_;                                       // GUARDED_BY(mu_)
  // A fatal worker loss, held back a moment in case it was caused by a
  // server (or data server) lost at the same time, which is then named.
  std::string worker_fatal_;                               // GUARDED_BY(mu_)
  std::chrono::steady_clock::time_point worker_fatal_at_;  // GUARDED_BY(mu_)
  bool finished_ = false;                                  // GUARDED_BY(mu_)
  // When the last live worker was lost without any having finished (the
  // epoch of Clock when none is).
  std::chrono::steady_clock::time_point every_worker_lost_;  // GUARDED_BY(mu_)
  bool stopping_ = false;                                    // GUARDED_BY(mu_)
  // The checkpoint round in progress (round_ > rounds_done_): the workers'
  // arrivals, whether the writer runs, whether to stop after it.
  int64_t round_ = 0;                   // GUARDED_BY(mu_)
  int64_t rounds_done_ = 0;             // GUARDED_BY(mu_)
  std::map<NodeId, Message> arrivals_;  // GUARDED_BY(mu_)
  bool round_writing_ = false;          // GUARDED_BY(mu_)
  bool round_stop_after_ = false;       // GUARDED_BY(mu_)
  bool last_checkpoint_ok_ = false;     // GUARDED_BY(mu_)
  // The furthest step a worker had reached in a round so far.
  int64_t last_round_step_ = 0;  // GUARDED_BY(mu_)
  // Lockstep: the step every worker of the round must arrive at.
  int64_t round_target_ = 0;  // GUARDED_BY(mu_)
  // Lockstep rounds: when the round last moved (an arrival, a catch-up).
  std::chrono::steady_clock::time_point round_moved_{};  // GUARDED_BY(mu_)
  std::thread writer_;  // the last round's writer (joined before the next)
  // Restarts: lost servers waiting for a replacement (since when), nodes
  // that re-joined and have not finished connecting, and what happened.
  bool rendezvous_done_ = false;  // GUARDED_BY(mu_)
  bool connected_done_ = false;   // GUARDED_BY(mu_)
  std::map<NodeId, std::chrono::steady_clock::time_point>
      replacing_;                       // GUARDED_BY(mu_)
  std::map<NodeId, double> rejoining_;  // GUARDED_BY(mu_)
  std::vector<NodeRestart> restarts_;   // GUARDED_BY(mu_)
  std::thread monitor_;
};

}  // namespace strata
