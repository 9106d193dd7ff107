#include "worker/fault_injection.h"

#include <chrono>
#include <sstream>
#include <thread>

namespace strata {

FaultInjection::FaultInjection(const ClusterRunOptions& o, int index)
    : index_(index),
      fail_worker_(o.fail_worker),
      fail_at_(o.fail_at),
      delay_ms_(o.worker_delay_ms),
      delay_rng_(o.seed * 7919 + static_cast<uint64_t>(index)) {}

Status FaultInjection::CrashIfDue(int64_t it) const {
  if (index_ != fail_worker_ || it != fail_at_) return Status::Ok();
  // Vanish like a crashed process (no leave, no done; the caller stops the
  // heartbeats).
  return Status::Cancelled(
      "worker {} crashed at iteration {} (cluster.fail_worker)", index_, it);
}

void FaultInjection::DelayStep() {
  if (delay_ms_ <= 0) return;
  std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(
      delay_rng_() % static_cast<uint64_t>(delay_ms_ + 1))));
}

std::string FaultInjection::SaveState() const {
  std::ostringstream out;
  out << delay_rng_;
  return out.str();
}

void FaultInjection::RestoreState(const std::string& state) {
  std::istringstream(state) >> delay_rng_;
}

}  // namespace strata
