#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <string>
#include <vector>

#include "transport/rpc.h"

namespace strata {

// The rendezvous store's messages, served by the coordinator (coordinator.h):
//   kStoreSet  payload 0 = key, payload 1 = value; the reply acknowledges.
//   kStoreGet  payload 0 = key; the reply (payload 0 = value) comes once the
//              key has been set.

// Gloo's rendezvous store over the coordinator: the nodes of a collective
// publish and look up their addresses through the node that already knows
// every member, so a collective needs no shared file system and no extra
// service, in threads, processes or on many machines alike. Thread-safe as
// far as the RpcEndpoint is. Gloo reports failures by exception: set/get
// throw gloo::IoException naming the key and the cause (the callers in
// collective.cc turn it into a Status).
class CoordinatorStore final : public gloo::rendezvous::Store {
 public:
  CoordinatorStore(RpcEndpoint& rpc, NodeId coordinator,
                   std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  RpcEndpoint& rpc_;
  const NodeId coordinator_;
  const std::chrono::milliseconds timeout_;
};

}  // namespace strata
