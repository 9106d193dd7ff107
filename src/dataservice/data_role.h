#pragma once

#include "run/role_context.h"

namespace strata {

// A data server (the mini-batch streaming service, paper 000;
// docs/design/data_service.md): serves batches to the workers it feeds
// (w mod m == index) from the data the caller loaded (ctx.data) and the
// plan's shards, until the coordinator ends the run; writes served.jsonl
// (one line per acknowledged batch) and, for the loss-aware sampler,
// stratum_loss.jsonl into the run directory; answers the coordinator's
// statistics and checkpoint requests. No LibTorch. Returns when the run
// ends; an error names the data server and what failed.
Status RunDataRole(RoleContext& ctx);

}  // namespace strata
