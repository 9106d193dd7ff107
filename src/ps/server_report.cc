#include "ps/server_report.h"

#include <vector>

#include "common/json_field.h"

namespace strata {

nlohmann::json ServerReport::ToJson() const {
  if (no_ranges) return nlohmann::json::object();
  nlohmann::json j{{"range", {range_begin, range_end}},
                   {"gradients_per_update", CountsToJson(gradients_per_update)},
                   {"tail_updates", tail_updates},
                   {"updates", updates},
                   {"applied_gradients", applied_gradients},
                   {"dropped", dropped},
                   {"deferred", deferred},
                   {"staleness", CountsToJson(staleness)}};
  if (ranges > 0) j["ranges"] = ranges;
  if (lost_updates_at_least)
    j["lost_updates_at_least"] = *lost_updates_at_least;
  if (follower) j["follower"] = true;
  return j;
}

Result<ServerReport> ServerReport::FromJson(const nlohmann::json& j) {
  constexpr const char* kWhat = "a server's statistics";
  ServerReport r;
  if (j.is_object() && j.empty()) {
    r.no_ranges = true;
    return r;
  }
  std::vector<int64_t> range;
  RETURN_IF_ERROR(JsonField(j, "range", kWhat, &range));
  if (range.size() != 2)
    return Status::DataLoss("{}: a range of {} numbers", kWhat, range.size());
  r.range_begin = range[0];
  r.range_end = range[1];
  RETURN_IF_ERROR(JsonField(j, "tail_updates", kWhat, &r.tail_updates));
  RETURN_IF_ERROR(JsonField(j, "updates", kWhat, &r.updates));
  RETURN_IF_ERROR(
      JsonField(j, "applied_gradients", kWhat, &r.applied_gradients));
  RETURN_IF_ERROR(JsonField(j, "dropped", kWhat, &r.dropped));
  RETURN_IF_ERROR(JsonField(j, "deferred", kWhat, &r.deferred));
  r.gradients_per_update =
      CountsFromJson(j.value("gradients_per_update", nlohmann::json()));
  r.staleness = CountsFromJson(j.value("staleness", nlohmann::json()));
  std::optional<int64_t> ranges;
  RETURN_IF_ERROR(JsonOptional(j, "ranges", kWhat, &ranges));
  r.ranges = ranges.value_or(0);
  RETURN_IF_ERROR(JsonOptional(j, "lost_updates_at_least", kWhat,
                               &r.lost_updates_at_least));
  std::optional<bool> follower;
  RETURN_IF_ERROR(JsonOptional(j, "follower", kWhat, &follower));
  r.follower = follower.value_or(false);
  return r;
}

}  // namespace strata
