#pragma once

// `strata shard` as a function (the CLI and the Python package call it):
// the config's dataset, sharded over `workers` with the config's
// data.sharding.* settings, written as a plan file and its report.

#include <atomic>
#include <nlohmann/json.hpp>
#include <string>

#include "common/config.h"
#include "common/status.h"

namespace strata {

// Loads the dataset the config names, computes the plan, writes it to
// `plan_path` and its report (sharding/report.h) to `report_path`, and
// returns the report. Errors name the key, file or path at fault. `stop`
// (may be null) is looked at once the data is loaded: Cancelled then,
// before the plan is computed (PCA and KMeans themselves run to their end).
Result<nlohmann::json> WriteShardPlanFiles(
    const Config& config, int workers, const std::string& plan_path,
    const std::string& report_path, const std::atomic<bool>* stop = nullptr);

}  // namespace strata
