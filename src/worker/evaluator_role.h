#pragma once

#include "run/role_context.h"

namespace strata {

// The evaluator: joins, evaluates the global model on a schedule
// (cluster.evaluator; eval.jsonl) and, when the coordinator asks at the
// end, the final model on both splits: it replies with the final
// evaluation, writes model.safetensors and model.json, and hands the final
// flat parameters to ctx.final_params (may be null).
Status RunEvaluatorRole(RoleContext& ctx);

}  // namespace strata
