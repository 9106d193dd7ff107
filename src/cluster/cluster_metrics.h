#pragma once

// The coordinator's Prometheus view of a run (docs/design/metrics.md): every
// node reports its live counters with its heartbeats (ClusterMember::
// SetStatusSource); this keeps the latest report of each node and renders
// them in Prometheus' text exposition format (version 0.0.4) for /metrics.
// No LibTorch here.

#include <chrono>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "cluster/role_table.h"
#include "common/mutex.h"

namespace strata {

// What the run is doing, for strata_run_state.
enum class RunPhase { kJoining, kTraining, kFinishing, kDone, kFailed };
const char* RunPhaseName(RunPhase phase);

class ClusterMetrics {
 public:
  // `labels`: constant labels of strata_run_info (mode, model, dataset).
  ClusterMetrics(RoleTable roles,
                 std::vector<std::pair<std::string, std::string>> labels);

  // A node's heartbeat status (JSON text; a worker's: WorkerMetrics::ToJson
  // with iterations, samples, compute_s, comm_s, data_wait_s, bytes_pushed,
  // bytes_pulled, dropped_gradients; a server's:
  // ParameterServer::StatsJson()). Malformed
  // text is ignored (counted in strata_status_errors_total). Thread-safe.
  void Update(NodeId node, const std::string& status_json,
              std::chrono::steady_clock::time_point now =
                  std::chrono::steady_clock::now()) EXCLUDES(mu_);
  void SetPhase(RunPhase phase) EXCLUDES(mu_);
  void SetLost(std::vector<std::string> lost) EXCLUDES(mu_);

  // The exposition text. Thread-safe.
  std::string Render() const EXCLUDES(mu_);

  // Histogram buckets (upper bounds) of strata_server_gradient_staleness.
  static const std::vector<int64_t>& StalenessBuckets();

 private:
  struct NodeState {
    nlohmann::json status;  // the latest, parsed
    // (time, samples) over the last few seconds: samples/s.
    std::deque<std::pair<std::chrono::steady_clock::time_point, double>>
        samples;
  };
  // The run-wide families: settings, phase, nodes, lost nodes, errors.
  void RenderRun(std::string* out) const REQUIRES(mu_);
  void RenderLost(std::string* out) const REQUIRES(mu_);

  const RoleTable roles_;
  const std::vector<std::pair<std::string, std::string>> labels_;
  mutable Mutex mu_;
  std::map<NodeId, NodeState> nodes_ GUARDED_BY(mu_);
  RunPhase phase_ GUARDED_BY(mu_) = RunPhase::kJoining;
  std::vector<std::string> lost_ GUARDED_BY(mu_);
  int64_t status_errors_ GUARDED_BY(mu_) = 0;
};

// A label value escaped for the exposition format (\\, \", \n).
std::string PrometheusLabel(const std::string& value);

}  // namespace strata
