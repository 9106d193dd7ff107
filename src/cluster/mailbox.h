#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "transport/message.h"

namespace strata {

// Messages a node received from its peers (a neighbour's model, a gossip
// push), kept until the node's worker thread takes them: the endpoint's
// thread puts, the worker takes. Thread-safe.
class Mailbox {
 public:
  void Put(Message msg);
  // Waits up to `timeout` for the message of `type` from `sender` with
  // header clock `clock` and removes it. kDeadlineExceeded says what was
  // awaited from whom; kCancelled once Close() was called.
  Result<Message> Take(MessageType type, NodeId sender, int64_t clock,
                       std::chrono::milliseconds timeout);
  // Removes and returns every message of `type` there is now.
  std::vector<Message> TakeAll(MessageType type);
  // Wakes every waiter with kCancelled (`reason`).
  void Close(const std::string& reason);

 private:
  Mutex mu_;
  CondVar cv_{&mu_};
  std::deque<Message> messages_ GUARDED_BY(mu_);
  bool closed_ GUARDED_BY(mu_) = false;
  std::string reason_ GUARDED_BY(mu_);
};

}  // namespace strata
