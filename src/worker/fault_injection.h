#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "common/status.h"
#include "run/options.h"

namespace strata {

// A worker's injected faults (tests and studies): it vanishes like a
// crashed process at cluster.fail_at (cluster.fail_worker), and sleeps up to
// cluster.worker_delay_ms after each step's compute. The delays come from a
// generator seeded per worker, which checkpoints keep. Not thread-safe: the
// worker's thread only.
class FaultInjection {
 public:
  FaultInjection(const ClusterRunOptions& options, int index);

  // Cancelled, naming the worker and step, when this worker is to crash
  // before step `it`; OK otherwise.
  Status CrashIfDue(int64_t it) const;
  // Sleeps the step's delay (nothing without cluster.worker_delay_ms).
  void DelayStep();

  // The delay generator's state (checkpoints), and back (empty text: the
  // generator is left as it is).
  std::string SaveState() const;
  void RestoreState(const std::string& state);

 private:
  const int index_;
  const int fail_worker_;
  const int64_t fail_at_;
  const int delay_ms_;
  std::mt19937_64 delay_rng_;
};

}  // namespace strata
