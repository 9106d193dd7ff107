#pragma once

// A heterogeneous worker (workers.*; docs/design/links.md): after each
// step's compute (batch, forward and backward pass: what compute_s
// counts), it sleeps so that its compute time becomes what a worker of its
// speed would take, with noise and transient stragglers on top. It scales the
// compute time measured on this machine, so a factor means the same on any
// machine: speed 0.25 makes a step's compute four times what it was. A step
// cannot be made faster than it ran: speeds above 1, and noise draws below 1,
// add nothing (so keep the fastest worker at 1).
//
// Deterministic: the draws of step `it` of worker `index` come from
// (workers.seed, index, it) alone, so a resumed run draws what the
// uninterrupted one would have, and nothing needs checkpointing. Not
// thread-safe: the worker's thread only.

#include <cstdint>

#include "run/emulation.h"
#include "run/worker_metrics.h"

namespace strata {

class WorkerPace {
 public:
  WorkerPace(const WorkerPaceOptions& options, int index);

  // The seconds to add to step `it` whose compute took `compute_s`: compute_s *
  // (noise / speed - 1), at least 0, plus a straggler's pause when the step
  // draws one.
  double ExtraSeconds(int64_t it, double compute_s) const;
  // Sleeps ExtraSeconds(it, compute_s) and adds the time slept to
  // metrics.paced_s. A sleep that overshoots (the thread woke late) is
  // taken off the next ones, so the total follows the model.
  void Stretch(int64_t it, double compute_s, WorkerMetrics& metrics);
  double speed() const { return speed_; }

 private:
  const WorkerPaceOptions o_;
  const int index_;
  const double speed_;
  const bool on_;
  double owed_s_ = 0;  // modelled minus slept so far
};

}  // namespace strata
