#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "common/status.h"
#include "run/options.h"
#include "run/run_dir.h"
#include "run/worker_metrics.h"

namespace strata {

// How one step's time split: before the compute (the exchange's
// BeforeStep), the compute (batch, forward, backward), the part of the
// compute spent waiting for parameters (the layer gate), and after it (the
// exchange's AfterStep).
struct StepTimes {
  double before_s = 0;
  double compute_s = 0;
  double param_wait_s = 0;
  double after_s = 0;
};

// A worker's metrics.jsonl: counts each step into its WorkerMetrics and a
// window of losses and accuracies, and every train.log_every steps (and at
// the last) appends a line: step, epoch, wall_s, the window's mean loss and
// accuracy, samples, the model version, compute and communication seconds,
// data_wait_s (the data service), and the staleness of the gradients
// applied since the last line. Not thread-safe: the worker's thread.
class MetricsWindow {
 public:
  // The lines go into `run_dir`'s metrics.jsonl, or to `forward` when it
  // is set (cluster.forward_metrics); with neither, no lines are written.
  MetricsWindow(const ClusterRunOptions& options, int index,
                const RunDirectory* run_dir,
                std::chrono::steady_clock::time_point start,
                std::function<Status(const std::string&)> forward = nullptr)
      : log_every_(options.log_every),
        index_(index),
        workers_(options.roles.num_workers()),
        run_dir_(run_dir),
        forward_(std::move(forward)),
        start_(start) {}

  // Step `it` of `total` (counted from 0) is done. `data_wait_s` < 0: no
  // data service. The run directory's I/O error.
  Status Record(int64_t it, int64_t total, int64_t epoch, double loss,
                double accuracy, int64_t samples, const StepTimes& times,
                int64_t version, double data_wait_s, WorkerMetrics& m);

 private:
  const int64_t log_every_;
  const int index_;
  // The run's worker count (each line says it: it changes with a scale).
  const int workers_;
  const RunDirectory* const run_dir_;
  const std::function<Status(const std::string&)> forward_;
  const std::chrono::steady_clock::time_point start_;
  double loss_ = 0, accuracy_ = 0;
  int64_t n_ = 0;
  int64_t staleness_sum_ = 0, staleness_count_ = 0;
};

}  // namespace strata
