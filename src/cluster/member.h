#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "cluster/role_table.h"
#include "common/mutex.h"
#include "common/timeline.h"
#include "transport/rpc.h"

namespace strata {

// A node's side of the coordinator protocol (coordinator.h): register and
// learn everyone's endpoint, send heartbeats, wait at barriers and on the
// clock table, report done, and hear a shutdown. Thread-safe. The owner
// routes unsolicited messages from the coordinator to OnMessage().
// StartHeartbeats() spawns a thread; StopHeartbeats() (or the destructor)
// joins it.
class ClusterMember {
 public:
  // A node that hears nothing back from the coordinator for
  // `heartbeat_timeout` stops itself ("lost the coordinator").
  ClusterMember(RpcEndpoint& rpc, RoleTable roles,
                std::chrono::milliseconds heartbeat_interval,
                std::chrono::milliseconds heartbeat_timeout =
                    std::chrono::milliseconds(30000));
  ~ClusterMember();
  ClusterMember(const ClusterMember&) = delete;
  ClusterMember& operator=(const ClusterMember&) = delete;

  // Connects to the coordinator, registers this node's endpoint, waits for
  // every other node (up to `timeout`), then connects to every peer.
  // kDeadlineExceeded says the cluster did not assemble in time.
  // `run_facts` (JSON text, may be empty) is what this node knows of the
  // run that others may not: workers send the parameter count and the
  // iteration budget. The coordinator checks that every node that sent them
  // agrees and passes them on in the cluster map; `on_run_facts` (may be
  // null) receives them (JSON text) before the second phase, so a server can
  // set up its key range before any worker can push.
  Status Join(
      const std::string& coordinator_endpoint,
      std::chrono::milliseconds timeout, const std::string& run_facts = "",
      const std::function<Status(const std::string&)>& on_run_facts = nullptr);
  // What this node reports with every heartbeat (JSON text: its live
  // counters, for the coordinator's /metrics); called on the heartbeat
  // thread, so it must be thread-safe. Before StartHeartbeats().
  void SetStatusSource(std::function<std::string()> source) {
    status_source_ = std::move(source);
  }
  // Join() starts the heartbeats as soon as its registration is sent;
  // StartHeartbeats() is then a no-op.
  void StartHeartbeats();
  void StopHeartbeats();
  // Waits until every live worker reached barrier `number`.
  Status Barrier(int64_t number, std::chrono::milliseconds timeout);
  // Reports `completed` iterations and waits for permission to start the
  // next one (immediate unless the run has a staleness bound).
  Status ClockWait(int64_t completed, std::chrono::milliseconds timeout);
  // Tells the coordinator this worker finished its iterations, with an
  // optional report (its metrics as JSON); `leaving`: it waits for no stop
  // after this (kShutdownLeaving).
  Status ReportDone(const std::string& report = "", bool leaving = false);

  // Stops this node as if the coordinator had said so, with `reason`.
  void ShutdownLocally(const std::string& reason);
  // Handles a kShutdown from the coordinator.
  void OnMessage(const Message& msg);
  bool shutdown_requested() const { return shutdown_.load(); }
  // The coordinator asked the workers to stop training early (Ctrl-C); the
  // run itself has not ended yet.
  bool training_stop_requested() const { return stop_training_.load(); }
  // Non-empty when the coordinator stopped the run because of an error.
  std::string shutdown_reason() const;
  // Waits up to `timeout` for a shutdown; true if one came.
  bool WaitForShutdown(std::chrono::milliseconds timeout);
  // This node's clock offset to the coordinator's, from the heartbeats'
  // round trips (the coordinator stamps its replies).
  timeline::ClockEstimate clock_offset() const;

 private:
  void NoteClock(const RpcCall& call, const Message& reply);

  RpcEndpoint& rpc_;
  const RoleTable roles_;
  const std::chrono::milliseconds heartbeat_interval_;
  const std::chrono::milliseconds heartbeat_timeout_;
  std::atomic<bool> shutdown_{false};
  std::atomic<bool> stop_training_{false};
  std::atomic<bool> joined_{false};  // Join() succeeded
  mutable Mutex mu_;
  CondVar cv_{&mu_};
  std::string reason_ GUARDED_BY(mu_);
  bool stop_heartbeats_ GUARDED_BY(mu_) = false;
  timeline::ClockEstimate clock_ GUARDED_BY(mu_);
  std::function<std::string()> status_source_;  // set before heartbeats
  std::thread heartbeat_;
};

}  // namespace strata
