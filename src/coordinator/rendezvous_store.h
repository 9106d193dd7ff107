#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "transport/rpc.h"

namespace strata {

// The coordinator's part that serves the rendezvous store (collective/
// store.h): kStoreSet keeps a value and answers the gets that waited for its
// key; kStoreGet answers at once, or once the key is set (the caller's wait
// is bounded). Thread-safe; replies go through `rpc`, which outlives it.
class RendezvousStore {
 public:
  explicit RendezvousStore(RpcEndpoint& rpc) : rpc_(rpc) {}
  void HandleSet(Message msg) EXCLUDES(mu_);
  void HandleGet(Message msg) EXCLUDES(mu_);

 private:
  RpcEndpoint& rpc_;
  Mutex mu_;
  std::map<std::string, std::string> values_ GUARDED_BY(mu_);
  std::vector<std::pair<std::string, Message>> waiting_ GUARDED_BY(mu_);
};

}  // namespace strata
