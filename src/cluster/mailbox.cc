#include "cluster/mailbox.h"

#include <algorithm>

namespace strata {

void Mailbox::Put(Message msg) {
  {
    MutexLock lock(&mu_);
    messages_.push_back(std::move(msg));
  }
  cv_.SignalAll();
}

Result<Message> Mailbox::Take(MessageType type, NodeId sender, int64_t clock,
                              std::chrono::milliseconds timeout) {
  MutexLock lock(&mu_);
  auto match = [&](const Message& m) {
    return m.header.type == type && m.header.sender == sender &&
           m.header.clock == clock;
  };
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    auto it = std::find_if(messages_.begin(), messages_.end(), match);
    if (it != messages_.end()) {
      Message m = std::move(*it);
      messages_.erase(it);
      return m;
    }
    if (closed_) return Status::Cancelled("{}", reason_);
    if (!cv_.WaitUntil(deadline)) {
      return Status::DeadlineExceeded(
          "no {} for step {} from node {} within {} ms", MessageTypeName(type),
          clock, sender, timeout.count());
    }
  }
}

std::vector<Message> Mailbox::TakeAll(MessageType type) {
  MutexLock lock(&mu_);
  std::vector<Message> out;
  for (auto it = messages_.begin(); it != messages_.end();) {
    if (it->header.type == type) {
      out.push_back(std::move(*it));
      it = messages_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

void Mailbox::Close(const std::string& reason) {
  {
    MutexLock lock(&mu_);
    closed_ = true;
    reason_ = reason;
  }
  cv_.SignalAll();
}

}  // namespace strata
