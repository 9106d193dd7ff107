#pragma once

#include "run/role_context.h"

namespace strata {

// A worker: joins, trains on its shard (or the batches the data service
// streams) with RunWorker, reports its metrics, and in a decentralized run
// stays until the end to serve its final model to the evaluator. A failure
// is returned after the node went silent (so the coordinator notices it
// like a crash).
Status RunWorkerRole(RoleContext& ctx);

}  // namespace strata
