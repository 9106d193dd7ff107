// The summary's straggler table (docs/design/timeline.md): per worker, its
// step-time percentiles and the share of its time it spent waiting for the
// others.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "run/worker_metrics.h"

namespace strata {

struct StragglerRow {
  int worker = 0;
  int64_t steps = 0;
  double p50_s = 0, p90_s = 0, p99_s = 0;  // step wall time
  double exchange_s = 0;  // in its exchanges: pushes, pulls, collectives
  // (exchange_s - the least exchange_s of any worker) / (compute + exchange):
  // what the exchanges cost it beyond what they cost the worker that waited
  // least, i.e. its waits for slower peers (lockstep modes) on equal links.
  double waiting_share = 0;
  double speed = 1;  // workers.speed (1 when not paced)
};

// One row per worker that reported; lost workers are left out.
std::vector<StragglerRow> StragglerTable(
    const std::vector<std::optional<WorkerMetrics>>& workers);
nlohmann::json StragglersToJson(const std::vector<StragglerRow>& rows);
// A text table for the log, one line per worker, with a header line.
std::string FormatStragglers(const std::vector<StragglerRow>& rows);

}  // namespace strata
