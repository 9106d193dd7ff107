#include "collective/store.h"

#include <gloo/common/error.h>

namespace strata {

CoordinatorStore::CoordinatorStore(RpcEndpoint& rpc, NodeId coordinator,
                                   std::chrono::milliseconds timeout)
    : rpc_(rpc), coordinator_(coordinator), timeout_(timeout) {}

void CoordinatorStore::set(const std::string& key,
                           const std::vector<char>& data) {
  Message m;
  m.header.type = MessageType::kStoreSet;
  m.payloads.push_back(Buffer::CopyOf(key.data(), key.size()));
  m.payloads.push_back(Buffer::CopyOf(data.data(), data.size()));
  auto reply = rpc_.Request(coordinator_, std::move(m))->Wait(timeout_);
  if (!reply.ok()) {
    throw gloo::IoException("rendezvous store: setting '" + key +
                            "': " + reply.status().message());
  }
}

std::vector<char> CoordinatorStore::get(const std::string& key) {
  Message m;
  m.header.type = MessageType::kStoreGet;
  m.payloads.push_back(Buffer::CopyOf(key.data(), key.size()));
  auto reply = rpc_.Request(coordinator_, std::move(m))->Wait(timeout_);
  if (!reply.ok()) {
    throw gloo::IoException("rendezvous store: waiting for '" + key +
                            "': " + reply.status().message());
  }
  if (reply->payloads.empty()) return {};
  const Buffer& b = reply->payloads[0];
  const char* p = reinterpret_cast<const char*>(b.data());
  return std::vector<char>(p, p + b.size());
}

void CoordinatorStore::wait(const std::vector<std::string>& keys) {
  wait(keys, timeout_);
}

void CoordinatorStore::wait(const std::vector<std::string>& keys,
                            const std::chrono::milliseconds& /*timeout*/) {
  // A get waits on the coordinator until the key exists.
  for (const std::string& key : keys) (void)get(key);
}

}  // namespace strata
