#pragma once

#include <chrono>
#include <vector>

#include "common/timeline_wire.h"
#include "coordinator/coordinator.h"
#include "run/options.h"
#include "run/summary.h"

namespace strata {

// The end of a cluster run, on the coordinator: releases the workers of a
// failed run, asks the live servers and data servers for their statistics
// and the evaluator for its final evaluation (not after a failure), tells
// every node to stop, and assembles the summary from what came back and
// the workers' reports. A node that does not answer is named in a warning
// and left out. Not thread-safe; `coordinator` outlives it.
class SummaryGather {
 public:
  using Clock = std::chrono::steady_clock;
  // `start`: when the coordinator started (setup_s runs from there to the
  // first barrier, train_s from that barrier to now, plus `prior_train_s`:
  // the training time before the checkpoint this run resumed from).
  SummaryGather(Coordinator& coordinator, const ClusterRunOptions& options,
                Clock::time_point start, double prior_train_s)
      : c_(coordinator),
        o_(options),
        start_(start),
        prior_train_s_(prior_train_s) {}

  ClusterSummary Gather(const Status& run_status, bool interrupted);
  // cluster.timeline: every node's spans, gathered by Gather() before the
  // nodes were told to stop (coordinator/timeline_gather.h); taken out.
  std::vector<timeline::NodeTimeline> TakeTimelines() {
    return std::move(timelines_);
  }

 private:
  // Tells the workers of a failed run at once (they may block on it).
  void ReleaseWorkers(const Status& run_status);
  // The statistics of every live node of `role` (servers, data servers).
  template <typename Report>
  std::vector<Report> StatsOf(Role role, const std::vector<NodeId>& lost);
  std::optional<FinalEvaluation> FinalEval();
  void AddWorkers(ClusterSummary& s);

  Coordinator& c_;
  const ClusterRunOptions& o_;
  const Clock::time_point start_;
  const double prior_train_s_;
  std::vector<timeline::NodeTimeline> timelines_;
};

}  // namespace strata
