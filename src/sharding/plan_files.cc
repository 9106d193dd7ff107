#include "sharding/plan_files.h"

#include "common/log.h"
#include "common/seconds.h"
#include "data/load.h"
#include "sharding/plan.h"
#include "sharding/report.h"
#include "sharding/resolve.h"

namespace strata {

Result<nlohmann::json> WriteShardPlanFiles(const Config& config, int workers,
                                           const std::string& plan_path,
                                           const std::string& report_path,
                                           const std::atomic<bool>* stop) {
  ASSIGN_OR_RETURN(ShardOptions options,
                   ShardOptionsFromConfig(config, workers));
  const auto t = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(DatasetSplits data, LoadDatasetFromConfig(config));
  const double load_s = Seconds(std::chrono::steady_clock::now() - t);
  LogInfo("{}: {} training examples loaded in {:.2f} s", data.train.name,
          data.train.size(), load_s);
  if (stop != nullptr && stop->load())
    return Status::Cancelled("sharding stopped before the plan was computed");
  ASSIGN_OR_RETURN(ShardPlan plan, ComputeShardPlan(data.train, options));
  plan.timings.load = load_s;
  plan.timings.total += load_s;
  RETURN_IF_ERROR(SaveShardPlan(plan, plan_path));
  nlohmann::json report = MakeShardReport(plan, data.train.labels);
  RETURN_IF_ERROR(WriteShardReport(report, report_path));
  return report;
}

}  // namespace strata
