#include "coordinator/restarts.h"

namespace strata {

void Restarts::Await(NodeId id, Clock::time_point since) {
  MutexLock lock(&mu_);
  awaited_[id] = since;
}

std::optional<Restarts::Clock::time_point> Restarts::TakeAwaited(NodeId id) {
  MutexLock lock(&mu_);
  auto it = awaited_.find(id);
  if (it == awaited_.end()) return std::nullopt;
  const Clock::time_point since = it->second;
  awaited_.erase(it);
  return since;
}

std::vector<NodeId> Restarts::Overdue(Clock::time_point now,
                                      Clock::duration timeout) const {
  MutexLock lock(&mu_);
  std::vector<NodeId> out;
  for (const auto& [id, since] : awaited_)
    if (now - since > timeout) out.push_back(id);
  return out;
}

void Restarts::Rejoining(NodeId id, double down_s) {
  MutexLock lock(&mu_);
  rejoining_[id] = down_s;
}

void Restarts::Connected(NodeId id, const std::string& who) {
  MutexLock lock(&mu_);
  auto it = rejoining_.find(id);
  if (it == rejoining_.end()) return;
  history_.push_back({who, it->second});
  rejoining_.erase(it);
}

std::vector<NodeRestart> Restarts::History() const {
  MutexLock lock(&mu_);
  return history_;
}

}  // namespace strata
