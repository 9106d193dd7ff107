#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/status.h"

namespace strata {

// A server node's statistics: what ParameterServer and ServerGroup report
// (kStatsReply, the status a node publishes) and summary.json's
// "servers_stats" keep. JSON only where it leaves the process.
struct ServerReport {
  int64_t range_begin = 0, range_end = 0;
  int64_t ranges = 0;  // 0: one range (not reported)
  std::map<int64_t, int64_t> gradients_per_update;  // count -> updates
  std::map<int64_t, int64_t> staleness;             // staleness -> count
  int64_t tail_updates = 0, updates = 0, applied_gradients = 0;
  int64_t dropped = 0, deferred = 0;
  std::optional<int64_t> lost_updates_at_least;  // a restored server
  // Sync k-of-n: a range that follows the lead range's choice counts no
  // dropped or deferred gradients and no staleness.
  bool follower = false;
  // A server without key ranges yet (the run failed before it had any)
  // reports nothing: {}.
  bool no_ranges = false;

  nlohmann::json ToJson() const;
  // DataLoss naming the field for a malformed report.
  static Result<ServerReport> FromJson(const nlohmann::json& j);
};

}  // namespace strata
