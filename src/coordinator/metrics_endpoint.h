#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cluster/cluster_metrics.h"
#include "common/status.h"
#include "metrics/http_server.h"

namespace strata {

// The coordinator's Prometheus endpoint (cluster.metrics_address,
// docs/design/metrics.md): /metrics renders the nodes' heartbeat statuses,
// the run's phase and its lost nodes. Thread-safe (ClusterMetrics is);
// the HTTP server stops with it.
class MetricsEndpoint {
 public:
  // Listens at `address` (host:port). The HTTP server's error, with the
  // key's name, when it cannot.
  static Result<std::unique_ptr<MetricsEndpoint>> Start(
      const std::string& address, const RoleTable& roles,
      std::vector<std::pair<std::string, std::string>> labels);

  // A node's heartbeat status (JSON text), from the coordinator's receive
  // thread.
  void Update(NodeId id, const std::string& status) {
    metrics_->Update(id, status);
  }
  void SetPhase(RunPhase phase, std::vector<std::string> lost) {
    metrics_->SetPhase(phase);
    metrics_->SetLost(std::move(lost));
  }
  std::string url() const { return http_->url(); }

 private:
  std::shared_ptr<ClusterMetrics> metrics_;
  std::unique_ptr<HttpServer> http_;
};

// cluster.metrics_address can be listened on (or is empty): checked before
// any node starts, so a busy port fails the run at once instead of after
// every node waited for a coordinator that stopped.
Status CheckMetricsAddress(const std::string& address);

}  // namespace strata
