#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "run/summary.h"
#include "transport/message.h"

namespace strata {

// The coordinator's record of replacements (cluster.restart): lost servers
// the run waits for, nodes that re-joined and have not finished connecting,
// and every replacement so far. Thread-safe.
class Restarts {
 public:
  using Clock = std::chrono::steady_clock;

  // Lost server `id` may be replaced until `since` + the restart timeout.
  void Await(NodeId id, Clock::time_point since) EXCLUDES(mu_);
  // Takes `id` off the waiting list; when it was awaited, since when.
  std::optional<Clock::time_point> TakeAwaited(NodeId id) EXCLUDES(mu_);
  // The awaited nodes whose replacement is overdue at `now`.
  std::vector<NodeId> Overdue(Clock::time_point now,
                              Clock::duration timeout) const EXCLUDES(mu_);
  // `id` re-joined after `down_s` seconds and is connecting to its peers.
  void Rejoining(NodeId id, double down_s) EXCLUDES(mu_);
  // `id` (described `who`) finished connecting: a replacement done.
  void Connected(NodeId id, const std::string& who) EXCLUDES(mu_);
  std::vector<NodeRestart> History() const EXCLUDES(mu_);

 private:
  mutable Mutex mu_;
  std::map<NodeId, Clock::time_point> awaited_ GUARDED_BY(mu_);
  std::map<NodeId, double> rejoining_ GUARDED_BY(mu_);
  std::vector<NodeRestart> history_ GUARDED_BY(mu_);
};

}  // namespace strata
