#include "common/config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace strata {
namespace {

const char* TypeName(ConfigKey::Type t) {
  switch (t) {
    case ConfigKey::Type::kInt:
      return "integer";
    case ConfigKey::Type::kFloat:
      return "number";
    case ConfigKey::Type::kBool:
      return "boolean";
    case ConfigKey::Type::kString:
      return "string";
  }
  return "?";
}

std::string Allowed(const ConfigKey& k) {
  if (!k.choices.empty()) {
    std::string s = "one of {";
    for (size_t i = 0; i < k.choices.size(); ++i) {
      s += (i ? ", " : "") + fmt::format("\"{}\"", k.choices[i]);
    }
    return s + "}";
  }
  std::string s = std::string(k.type == ConfigKey::Type::kInt ? "an " : "a ") +
                  TypeName(k.type);
  bool has_min = std::isfinite(k.min), has_max = std::isfinite(k.max);
  if (has_min && has_max) {
    s += fmt::format(" in [{}, {}]", k.min, k.max);
  } else if (has_min) {
    s += fmt::format(" >= {}", k.min);
  } else if (has_max) {
    s += fmt::format(" <= {}", k.max);
  }
  return s;
}

Status Validate(const ConfigKey& k, const ConfigValue& v) {
  auto bad = [&](const std::string& shown) {
    return Status::InvalidArgument("config key '{}': bad value {}; allowed: {}",
                                   k.name, shown, Allowed(k));
  };
  switch (k.type) {
    case ConfigKey::Type::kInt: {
      if (!std::holds_alternative<int64_t>(v)) return bad(FormatConfigValue(v));
      double x = static_cast<double>(std::get<int64_t>(v));
      if (x < k.min || x > k.max) return bad(FormatConfigValue(v));
      return Status::Ok();
    }
    case ConfigKey::Type::kFloat: {
      double x;
      if (std::holds_alternative<double>(v)) {
        x = std::get<double>(v);
      } else if (std::holds_alternative<int64_t>(v)) {
        x = static_cast<double>(std::get<int64_t>(v));
      } else {
        return bad(FormatConfigValue(v));
      }
      if (!std::isfinite(x) || x < k.min || x > k.max)
        return bad(FormatConfigValue(v));
      return Status::Ok();
    }
    case ConfigKey::Type::kBool:
      if (!std::holds_alternative<bool>(v)) return bad(FormatConfigValue(v));
      return Status::Ok();
    case ConfigKey::Type::kString: {
      if (!std::holds_alternative<std::string>(v))
        return bad(FormatConfigValue(v));
      const auto& s = std::get<std::string>(v);
      if (!k.choices.empty() &&
          std::find(k.choices.begin(), k.choices.end(), s) == k.choices.end())
        return bad(FormatConfigValue(v));
      return Status::Ok();
    }
  }
  return Status::Internal("unreachable");
}

ConfigValue Normalise(const ConfigKey& k, const ConfigValue& v) {
  if (k.type == ConfigKey::Type::kFloat && std::holds_alternative<int64_t>(v))
    return static_cast<double>(std::get<int64_t>(v));
  return v;
}

// Flattens nested TOML tables into dotted keys and sets each.
Status ApplyTable(Config& config, const toml::table& table,
                  const std::string& prefix, const std::string& origin) {
  for (const auto& [key_view, node] : table) {
    std::string key = prefix + std::string(key_view.str());
    if (const toml::table* sub = node.as_table()) {
      if (Config::FindKey(key) != nullptr) {
        return Status::InvalidArgument(
            "{}: config key '{}' must be a value, not a table", origin, key);
      }
      RETURN_IF_ERROR(ApplyTable(config, *sub, key + ".", origin));
      continue;
    }
    ConfigValue value;
    if (auto i = node.value<int64_t>(); i && node.is_integer()) {
      value = *i;
    } else if (auto d = node.as_floating_point()) {
      value = d->get();
    } else if (auto b = node.as_boolean()) {
      value = b->get();
    } else if (auto s = node.as_string()) {
      value = s->get();
    } else {
      return Status::InvalidArgument(
          "{}: config key '{}' has an unsupported TOML type (arrays, dates "
          "and inline tables are not used by strata)",
          origin, key);
    }
    Status st = config.Set(key, value);
    if (!st.ok()) return st.WithContext(origin);
  }
  return Status::Ok();
}

}  // namespace

std::string FormatConfigValue(const ConfigValue& value) {
  if (auto i = std::get_if<int64_t>(&value)) return std::to_string(*i);
  if (auto d = std::get_if<double>(&value)) {
    std::string s = fmt::format("{}", *d);
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
    return s;
  }
  if (auto b = std::get_if<bool>(&value)) return *b ? "true" : "false";
  std::ostringstream out;
  out << toml::value<std::string>(std::get<std::string>(value));
  return out.str();
}

Config::Config() {
  for (const ConfigKey& k : Schema()) values_[k.name] = k.default_value;
}

const ConfigKey* Config::FindKey(const std::string& name) {
  for (const ConfigKey& k : Schema()) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

Status Config::Set(const std::string& key, const ConfigValue& value) {
  const ConfigKey* k = FindKey(key);
  if (k == nullptr) {
    // Suggest keys of the same section to make typos easy to fix.
    std::string section = key.substr(0, key.rfind('.') + 1);
    std::string known;
    for (const ConfigKey& c : Schema()) {
      if (!section.empty() && c.name.rfind(section, 0) == 0 &&
          c.name.find('.', section.size()) == std::string::npos)
        known += (known.empty() ? "" : ", ") + c.name;
    }
    return Status::InvalidArgument(
        "unknown config key '{}'{}", key,
        known.empty() ? std::string(" (see `strata train --help`)")
                      : " (known keys in this section: " + known + ")");
  }
  RETURN_IF_ERROR(Validate(*k, value));
  values_[key] = Normalise(*k, value);
  return Status::Ok();
}

Status Config::SetFromString(const std::string& key, const std::string& text) {
  const ConfigKey* k = FindKey(key);
  if (k == nullptr) return Set(key, text);  // produces the unknown-key error
  auto bad = [&]() {
    return Status::InvalidArgument(
        "config key '{}': bad value '{}'; allowed: {}", key, text, Allowed(*k));
  };
  switch (k->type) {
    case ConfigKey::Type::kInt: {
      errno = 0;
      char* end = nullptr;
      long long x = std::strtoll(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || errno != 0) return bad();
      return Set(key, static_cast<int64_t>(x));
    }
    case ConfigKey::Type::kFloat: {
      errno = 0;
      char* end = nullptr;
      double x = std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0' || errno != 0) return bad();
      return Set(key, x);
    }
    case ConfigKey::Type::kBool:
      if (text == "true" || text == "1") return Set(key, true);
      if (text == "false" || text == "0") return Set(key, false);
      return bad();
    case ConfigKey::Type::kString: {
      std::string s = text;
      if (s.size() >= 2 && s.front() == '"' && s.back() == '"')
        s = s.substr(1, s.size() - 2);
      return Set(key, s);
    }
  }
  return bad();
}

Status Config::ApplyOverride(const std::string& assignment) {
  size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    return Status::InvalidArgument(
        "override '{}' is not of the form section.key=value", assignment);
  }
  return SetFromString(assignment.substr(0, eq), assignment.substr(eq + 1));
}

Result<Config> Config::FromTomlString(const std::string& text,
                                      const std::string& origin) {
  Config config;
  toml::table table;
  try {
    table = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    return Status::InvalidArgument("{}:{}:{}: invalid TOML: {}", origin,
                                   e.source().begin.line,
                                   e.source().begin.column, e.description());
  }
  RETURN_IF_ERROR(ApplyTable(config, table, "", origin));
  return config;
}

Result<Config> Config::FromTomlFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("config file '{}' cannot be opened", path);
  std::stringstream buf;
  buf << in.rdbuf();
  return FromTomlString(buf.str(), path);
}

int64_t Config::GetInt(const std::string& key) const {
  auto it = values_.find(key);
  STRATA_CHECK(it != values_.end() &&
               std::holds_alternative<int64_t>(it->second));
  return std::get<int64_t>(it->second);
}
double Config::GetFloat(const std::string& key) const {
  auto it = values_.find(key);
  STRATA_CHECK(it != values_.end() &&
               std::holds_alternative<double>(it->second));
  return std::get<double>(it->second);
}
bool Config::GetBool(const std::string& key) const {
  auto it = values_.find(key);
  STRATA_CHECK(it != values_.end() && std::holds_alternative<bool>(it->second));
  return std::get<bool>(it->second);
}
const std::string& Config::GetString(const std::string& key) const {
  auto it = values_.find(key);
  STRATA_CHECK(it != values_.end() &&
               std::holds_alternative<std::string>(it->second));
  return std::get<std::string>(it->second);
}

std::string Config::ToToml() const {
  // Group by table path (everything before the last dot), in schema order.
  std::vector<std::string> tables;
  for (const ConfigKey& k : Schema()) {
    std::string t = k.name.substr(0, k.name.rfind('.'));
    if (std::find(tables.begin(), tables.end(), t) == tables.end())
      tables.push_back(t);
  }
  std::string out = "# strata resolved configuration\n";
  for (const std::string& t : tables) {
    out += "\n[" + t + "]\n";
    for (const ConfigKey& k : Schema()) {
      if (k.name.substr(0, k.name.rfind('.')) != t) continue;
      out += k.name.substr(k.name.rfind('.') + 1) + " = " +
             FormatConfigValue(values_.at(k.name)) + "\n";
    }
  }
  return out;
}

Status Config::WriteToml(const std::string& path) const {
  std::ofstream out(path);
  if (!out) return Status::IoError("cannot write config file '{}'", path);
  out << ToToml();
  if (!out) return Status::IoError("error writing config file '{}'", path);
  return Status::Ok();
}

std::string Config::SchemaHelp() {
  std::string out =
      "Config keys (set in -c FILE.toml or with --set key=value):\n";
  for (const ConfigKey& k : Schema()) {
    out += fmt::format("  {:<34} {:<8} default {}\n", k.name, TypeName(k.type),
                       FormatConfigValue(k.default_value));
    out += fmt::format("  {:<34} {}{}\n", "", k.help,
                       k.choices.empty() ? "" : " [" + Allowed(k) + "]");
  }
  return out;
}

}  // namespace strata
