// The coordinator's /metrics text: counters from the nodes' heartbeat
// statuses, samples/s over the last reports, the staleness histogram, the
// run's phase and lost nodes; and Prometheus' own linter accepts it.
#include "cluster/cluster_metrics.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "shell_util.h"

namespace strata {
namespace {

using std::chrono::milliseconds;

bool Has(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST(ClusterMetricsTest, RendersWorkersServersAndTheRunState) {
  RoleTable roles = RoleTable::Standard(1, 2, true);
  ClusterMetrics m(roles, {{"mode", "async"}, {"model", "my \"mlp\""}});
  const auto t0 = std::chrono::steady_clock::now();
  m.Update(roles.WorkerId(0), R"({"iterations": 10, "samples": 320})", t0);
  m.Update(
      roles.WorkerId(0),
      R"({"iterations": 20, "samples": 640, "compute_s": 1.5, "comm_s": 0.25,
               "bytes_pushed": 4096})",
      t0 + milliseconds(500));
  m.Update(roles.WorkerId(1), R"({"iterations": 3, "samples": 96})", t0);
  m.Update(roles.ServerId(0),
           R"({"updates": 23, "applied_gradients": 23, "dropped": 1,
               "deferred": 2, "staleness": {"0": 5, "1": 10, "3": 7, "70": 1}})",
           t0);
  m.Update(roles.WorkerId(1), "not json", t0);
  m.SetPhase(RunPhase::kTraining);
  m.SetLost({"worker 1 (node 3)"});
  const std::string text = m.Render();

  EXPECT_TRUE(Has(text,
                  "strata_run_info{mode=\"async\",model=\"my "
                  "\\\"mlp\\\"\"} 1"))
      << text;
  EXPECT_TRUE(Has(text, "strata_run_state{state=\"training\"} 1"));
  EXPECT_TRUE(Has(text, "strata_run_state{state=\"joining\"} 0"));
  EXPECT_TRUE(Has(text, "strata_nodes{role=\"worker\"} 2"));
  EXPECT_TRUE(Has(text, "strata_lost_nodes 1"));
  EXPECT_TRUE(Has(text, "strata_lost_node{node=\"worker 1 (node 3)\"} 1"));
  EXPECT_TRUE(Has(text, "strata_status_errors_total 1"));
  EXPECT_TRUE(Has(text, "strata_worker_steps_total{worker=\"0\"} 20"));
  EXPECT_TRUE(Has(text, "strata_worker_samples_total{worker=\"1\"} 96"));
  EXPECT_TRUE(
      Has(text, "strata_worker_compute_seconds_total{worker=\"0\"} 1.5"));
  EXPECT_TRUE(Has(
      text, "strata_worker_communication_seconds_total{worker=\"0\"} 0.25"));
  EXPECT_TRUE(Has(text, "strata_worker_pushed_bytes_total{worker=\"0\"} 4096"));
  // 320 samples in 0.5 s; one report only: no rate yet.
  EXPECT_TRUE(Has(text, "strata_worker_samples_per_second{worker=\"0\"} 640"));
  EXPECT_TRUE(Has(text, "strata_worker_samples_per_second{worker=\"1\"} 0"));
  EXPECT_TRUE(Has(text, "strata_server_updates_total{server=\"0\"} 23"));
  EXPECT_TRUE(
      Has(text, "strata_server_dropped_gradients_total{server=\"0\"} 1"));
  EXPECT_TRUE(
      Has(text, "strata_server_deferred_gradients_total{server=\"0\"} 2"));
  // Cumulative buckets; 70 is beyond the last bound.
  EXPECT_TRUE(
      Has(text,
          "strata_server_gradient_staleness_bucket{server=\"0\",le=\"0\"} 5"));
  EXPECT_TRUE(
      Has(text,
          "strata_server_gradient_staleness_bucket{server=\"0\",le=\"2\"} 15"));
  EXPECT_TRUE(
      Has(text,
          "strata_server_gradient_staleness_bucket{server=\"0\",le=\"4\"} 22"));
  EXPECT_TRUE(Has(
      text,
      "strata_server_gradient_staleness_bucket{server=\"0\",le=\"64\"} 22"));
  EXPECT_TRUE(Has(
      text,
      "strata_server_gradient_staleness_bucket{server=\"0\",le=\"+Inf\"} 23"));
  EXPECT_TRUE(
      Has(text, "strata_server_gradient_staleness_sum{server=\"0\"} 101"));
  EXPECT_TRUE(
      Has(text, "strata_server_gradient_staleness_count{server=\"0\"} 23"));
  // Every family has its HELP and TYPE.
  EXPECT_TRUE(Has(text, "# TYPE strata_server_gradient_staleness histogram"));
  EXPECT_TRUE(Has(text, "# TYPE strata_worker_samples_total counter"));

  // Prometheus' linter (Debian's prometheus package).
  if (std::system("command -v promtool >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "promtool not installed (scripts/setup.sh installs "
                    "Debian's prometheus): the text was not linted";
  int rc = 0;
  const std::string said =
      testing_util::RunShellWithInput("promtool check metrics", text, &rc);
  EXPECT_EQ(rc, 0) << "promtool check metrics: " << said;
}

TEST(ClusterMetricsTest, AFreshCoordinatorSaysJoiningAndNothingElse) {
  ClusterMetrics m(RoleTable::Standard(1, 1, false), {});
  const std::string text = m.Render();
  EXPECT_TRUE(Has(text, "strata_run_state{state=\"joining\"} 1"));
  EXPECT_EQ(text.find("strata_worker_"), std::string::npos);
  EXPECT_EQ(text.find("strata_lost_node{"), std::string::npos);
}

}  // namespace
}  // namespace strata
