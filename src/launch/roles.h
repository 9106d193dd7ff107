#pragma once

#include "run/role_context.h"

namespace strata {

// The one role table: the main function of each role (coordinator, server,
// worker, evaluator, data server). Every launcher (threads in one process,
// --processes, strata node, MPI and Slurm ranks) runs a node through it.
RoleMain RoleMainOf(Role role);

// Runs ctx's role. An exception that escapes it (a bug, or LibTorch
// throwing past a boundary) is logged with the node's name and becomes an
// Internal error: it stops only that role; its node goes silent and the
// coordinator reports it lost.
Status RunRole(RoleContext& ctx);

}  // namespace strata
