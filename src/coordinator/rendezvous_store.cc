#include "coordinator/rendezvous_store.h"

namespace strata {
namespace {

void ReplyValue(RpcEndpoint& rpc, const Message& get, const std::string& v) {
  Message reply;
  reply.header.type = MessageType::kAck;
  reply.payloads.push_back(Buffer::CopyOf(v.data(), v.size()));
  rpc.ReplyOrLog(get, std::move(reply));
}

}  // namespace

void RendezvousStore::HandleSet(Message msg) {
  if (msg.payloads.size() < 2) {
    rpc_.ReplyErrorOrLog(msg,
                         Status::InvalidArgument("store set without a value"));
    return;
  }
  const std::string key = msg.payloads[0].ToString();
  const std::string value = msg.payloads[1].ToString();
  std::vector<Message> ready;
  {
    MutexLock lock(&mu_);
    values_[key] = value;
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (it->first == key) {
        ready.push_back(std::move(it->second));
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
  }
  Message ack;
  ack.header.type = MessageType::kAck;
  rpc_.ReplyOrLog(msg, std::move(ack));
  for (Message& get : ready) ReplyValue(rpc_, get, value);
}

void RendezvousStore::HandleGet(Message msg) {
  if (msg.payloads.empty()) {
    rpc_.ReplyErrorOrLog(msg,
                         Status::InvalidArgument("store get without a key"));
    return;
  }
  const std::string key = msg.payloads[0].ToString();
  std::string value;
  {
    MutexLock lock(&mu_);
    auto it = values_.find(key);
    if (it == values_.end()) {
      // Answered when the key is set; the caller's wait is bounded.
      waiting_.emplace_back(key, std::move(msg));
      return;
    }
    value = it->second;
  }
  ReplyValue(rpc_, msg, value);
}

}  // namespace strata
