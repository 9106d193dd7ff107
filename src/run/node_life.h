#pragma once

// Two steps of every role's life in a run, shared by the roles: asking the
// coordinator for the node's checkpoint state, and serving until the run
// ends (or vanishing, under fault injection).

#include <string>

#include "cluster/node.h"
#include "common/status.h"
#include "run/options.h"
#include "transport/rpc.h"

namespace strata {

// A node's state from the checkpoint the run resumes from (no payloads: a
// fresh start), asked of the coordinator once the node joined
// (kRestoreRequest; docs/design/checkpoints.md). The request's error, with
// `who` and what it asked, when the coordinator does not answer within
// cluster.request_timeout_ms.
Result<Message> RequestCheckpointState(RpcEndpoint& rpc,
                                       const ClusterRunOptions& o,
                                       const std::string& who);

// Waits until the coordinator ends the run; or, when fault injection
// (cluster.fail_node) picks role `role` index `index`, makes the node vanish
// like a crashed process once its time came (kCancelled).
Status ServeUntilTheEnd(Node& node, const ClusterRunOptions& o, Role role,
                        int index);

}  // namespace strata
