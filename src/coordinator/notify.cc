#include "coordinator/notify.h"

#include "common/log.h"

namespace strata {

void NotifyNodes(RpcEndpoint& rpc, const RoleTable& roles,
                 const std::vector<NodeId>& to, MessageType type, int64_t clock,
                 const std::string& payload) {
  for (NodeId id : to) {
    Message m;
    m.header.type = type;
    m.header.clock = clock;
    if (!payload.empty())
      m.payloads.push_back(Buffer::CopyOf(payload.data(), payload.size()));
    Status sent = rpc.Send(id, std::move(m));
    if (!sent.ok())
      LogWarning("coordinator: {} to {} not sent: {}", MessageTypeName(type),
                 roles.Describe(id), sent.message());
  }
}

}  // namespace strata
