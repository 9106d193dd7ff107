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

struct CoordinatorOptions {
  RoleTable roles;
  std::chrono::milliseconds heartbeat_timeout{5000};
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
  bool finished_ = false;                                   // GUARDED_BY(mu_)
  bool stopping_ = false;                                   // GUARDED_BY(mu_)
  std::thread monitor_;
};

}  // namespace strata
