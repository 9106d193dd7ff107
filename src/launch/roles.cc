#include "launch/roles.h"

#include <exception>

#include "common/log.h"
#include "coordinator/coordinator_role.h"
#include "dataservice/data_role.h"
#include "server/server_role.h"
#include "worker/evaluator_role.h"
#include "worker/worker_role.h"

namespace strata {

RoleMain RoleMainOf(Role role) {
  switch (role) {
    case Role::kCoordinator:
      return RunCoordinatorRole;
    case Role::kServer:
      return RunServerRole;
    case Role::kWorker:
      return RunWorkerRole;
    case Role::kEvaluator:
      return RunEvaluatorRole;
    case Role::kData:
      return RunDataRole;
  }
  return nullptr;
}

Status RunRole(RoleContext& ctx) {
  RoleMain run = RoleMainOf(ctx.role);
  if (run == nullptr) return Status::Internal("no main function for a role");
  try {
    return run(ctx);
  } catch (const std::exception& e) {
    LogError("{}: stopped by an exception: {}", ctx.who(), e.what());
    return Status::Internal("{}: stopped by an exception: {}", ctx.who(),
                            e.what());
  }
}

}  // namespace strata
