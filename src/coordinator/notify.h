#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cluster/role_table.h"
#include "transport/rpc.h"

namespace strata {

// One-way messages (clock, optional text payload) from the coordinator to
// each of `to`; a failed send is logged, naming the node.
void NotifyNodes(RpcEndpoint& rpc, const RoleTable& roles,
                 const std::vector<NodeId>& to, MessageType type, int64_t clock,
                 const std::string& payload = "");

}  // namespace strata
