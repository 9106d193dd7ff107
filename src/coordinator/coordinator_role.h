#pragma once

#include "run/role_context.h"

namespace strata {

// The coordinator role: runs the Coordinator (coordinator.h) until every
// worker is done, the run fails or ctx.stop is set (then, with checkpoints,
// one last checkpoint round first); serves /metrics (cluster.
// metrics_address); writes the cluster's checkpoints (cluster_checkpoints.h)
// and, at the end, gathers the servers' and data servers' statistics, the
// workers' reports and the evaluator's final evaluation into the summary,
// which it writes to summary.json and hands to ctx.summary (may be null).
// Returns the run's error (a lost node in sync mode, named; the summary is
// written anyway), or why the coordinator could not run (a checkpoint that
// cannot be resumed, a busy metrics address, fault injection making it
// vanish). ctx.resume_from: the checkpoint CheckResumable returned, or null
// to read the newest one (with checkpoint.resume).
Status RunCoordinatorRole(RoleContext& ctx);

}  // namespace strata
