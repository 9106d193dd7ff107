#pragma once

#include "run/role_context.h"

namespace strata {

// A server: joins, learns the parameter count, the key layout's cut points
// and the iteration budget from the coordinator's cluster map (the run
// facts the workers announce), serves its key ranges (ps/server_group.h)
// until the coordinator says stop. Needs neither the model nor the dataset,
// and no LibTorch. Returns when the run ends; an error names the server and
// what failed (bad run facts, a restore without a checkpoint state, the
// run ended with an error).
Status RunServerRole(RoleContext& ctx);

}  // namespace strata
