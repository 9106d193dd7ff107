#include "common/json_field.h"

#include <cerrno>
#include <cstdlib>

namespace strata {

nlohmann::json CountsToJson(const std::map<int64_t, int64_t>& counts) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : counts) j[std::to_string(k)] = v;
  return j;
}

std::map<int64_t, int64_t> CountsFromJson(const nlohmann::json& j) {
  std::map<int64_t, int64_t> counts;
  if (!j.is_object()) return counts;
  for (const auto& [k, v] : j.items()) {
    if (!v.is_number_integer()) continue;
    char* end = nullptr;
    errno = 0;
    const long long key = std::strtoll(k.c_str(), &end, 10);
    if (k.empty() || *end != '\0' || errno == ERANGE) continue;
    counts[key] = v.get<int64_t>();
  }
  return counts;
}

}  // namespace strata
