#pragma once

// Reading typed values out of JSON received from elsewhere (a report off
// the wire, a file): a wrong or missing field is a DataLoss that names it,
// never an exception.

#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <type_traits>

#include "common/status.h"

namespace strata {

// j[key] as T; DataLoss naming `what`, the key and the JSON when it is
// missing or of another type.
template <typename T>
Status JsonField(const nlohmann::json& j, const char* key, const char* what,
                 T* out) {
  try {
    *out = j.at(key).get<T>();
    return Status::Ok();
  } catch (const std::exception&) {
    return Status::DataLoss("{}: no {} \"{}\" in {}", what,
                            std::is_same_v<T, std::string> ? "text" : "number",
                            key, j.dump());
  }
}

// j[key] as a number, where null stands for NaN: JSON has no NaN, and
// nlohmann::json writes one as null (a diverged run's loss). DataLoss as
// JsonField when it is missing or of another type.
inline Status JsonNumberOrNan(const nlohmann::json& j, const char* key,
                              const char* what, double* out) {
  auto it = j.find(key);
  if (it != j.end() && it->is_null()) {
    *out = std::numeric_limits<double>::quiet_NaN();
    return Status::Ok();
  }
  return JsonField(j, key, what, out);
}

// j[key] as T when present and not null (`out` untouched otherwise);
// DataLoss as JsonField for a value of another type.
template <typename T>
Status JsonOptional(const nlohmann::json& j, const char* key, const char* what,
                    std::optional<T>* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  T value;
  RETURN_IF_ERROR(JsonField(j, key, what, &value));
  *out = std::move(value);
  return Status::Ok();
}

// A histogram (value -> count) as the JSON object {"<value>": count} that
// statistics and checkpoints carry, and back: what is not such an object,
// or an entry whose key is not an integer or whose count is not one, is
// left out.
nlohmann::json CountsToJson(const std::map<int64_t, int64_t>& counts);
std::map<int64_t, int64_t> CountsFromJson(const nlohmann::json& j);

}  // namespace strata
