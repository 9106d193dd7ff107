#include "coordinator/barriers.h"

#include <algorithm>
#include <limits>
#include <set>

namespace strata {

using Clock = std::chrono::steady_clock;

void Barriers::Arrive(Message msg) {
  MutexLock lock(&mu_);
  if (msg.header.clock <= released_) {
    Message release;
    release.header.type = MessageType::kBarrierRelease;
    release.header.clock = msg.header.clock;
    rpc_.ReplyOrLog(msg, std::move(release));
    return;
  }
  waiting_[msg.header.clock].push_back(std::move(msg));
}

void Barriers::Release(const WorkerSet& workers) {
  MutexLock lock(&mu_);
  ReleaseLocked(workers);
}

void Barriers::ReleaseLocked(const WorkerSet& workers) {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    std::set<NodeId> arrived;
    for (const Message& m : it->second) arrived.insert(m.header.sender);
    bool all = true;
    for (NodeId id : workers.live) {
      if (!arrived.count(id) && !workers.Done(id)) all = false;
    }
    if (!all) {
      ++it;
      continue;
    }
    if (it->first == 0 && training_start_ == Clock::time_point{})
      training_start_ = Clock::now();
    for (Message& m : it->second) {
      Message release;
      release.header.type = MessageType::kBarrierRelease;
      release.header.clock = it->first;
      rpc_.ReplyOrLog(m, std::move(release));
    }
    released_ = std::max(released_, it->first);
    it = waiting_.erase(it);
  }
}

Clock::time_point Barriers::TrainingStart() const {
  MutexLock lock(&mu_);
  return training_start_;
}

void ClockTable::Request(Message msg) {
  MutexLock lock(&mu_);
  clocks_[msg.header.sender] = msg.header.clock;
  waiting_.push_back(std::move(msg));
}

void ClockTable::Advance(NodeId id, int64_t clock) {
  MutexLock lock(&mu_);
  int64_t& c = clocks_[id];
  c = std::max(c, clock);
}

void ClockTable::Finished(NodeId id) {
  MutexLock lock(&mu_);
  clocks_[id] = std::numeric_limits<int64_t>::max() / 2;
}

void ClockTable::Grant(const WorkerSet& workers) {
  MutexLock lock(&mu_);
  GrantLocked(workers);
}

int64_t ClockTable::MinClockLocked(const WorkerSet& workers) const {
  int64_t min_clock = std::numeric_limits<int64_t>::max();
  for (NodeId id : workers.live) {
    auto it = clocks_.find(id);
    min_clock = std::min(min_clock, it == clocks_.end() ? 0 : it->second);
  }
  return min_clock;
}

void ClockTable::GrantLocked(const WorkerSet& workers) {
  const int64_t min_clock = MinClockLocked(workers);
  std::vector<Message> still;
  for (Message& m : waiting_) {
    if (staleness_ < 0 || m.header.clock - min_clock <= staleness_) {
      Message grant;
      grant.header.type = MessageType::kAck;
      grant.header.clock = min_clock;
      rpc_.ReplyOrLog(m, std::move(grant));
    } else {
      still.push_back(std::move(m));
    }
  }
  waiting_.swap(still);
}

}  // namespace strata
