#include "worker/stop_signal.h"

#include "common/log.h"

namespace strata {

bool StopSignal::Requested() const {
  return after_round_ || (!checkpoints_ && stop_ != nullptr && stop_->load()) ||
         member_.training_stop_requested() ||
         (member_.shutdown_requested() && member_.shutdown_reason().empty());
}

bool StopSignal::StoppedInside(const Status& st, const char* where,
                               int64_t it) const {
  if (st.ok() || !Requested()) return false;
  LogInfo("worker {}: stopped {} step {} ({})", index_, where, it,
          st.message());
  return true;
}

}  // namespace strata
