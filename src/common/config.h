#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "common/status.h"

namespace strata {

using ConfigValue = std::variant<int64_t, double, bool, std::string>;

// One documented configuration key: its type, default, allowed values and
// help. The schema (config_schema.cc) is the single list of keys strata
// understands; `strata train --help` prints it.
struct ConfigKey {
  enum class Type { kInt, kFloat, kBool, kString };
  std::string name;  // "section.key", sections may nest: "data.synthetic.noise"
  Type type;
  ConfigValue default_value;
  std::string help;
  std::vector<std::string> choices;  // allowed strings; empty = any
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
};

// The run configuration: every schema key with a value. Built from the
// defaults, then a TOML file, then `--set key=value` overrides; every step
// validates and names the offending key, value and what is allowed.
// Thread-compatible: const methods may be called concurrently.
class Config {
 public:
  // All keys at their defaults.
  Config();

  // Reads a TOML file over the defaults. Errors: the file is missing or not
  // valid TOML (with line), an unknown key, a value of the wrong type or out
  // of range.
  static Result<Config> FromTomlFile(const std::string& path);
  static Result<Config> FromTomlString(const std::string& text,
                                       const std::string& origin);

  // Applies "section.key=value" (the value parsed according to the key's
  // type). InvalidArgument names the key, the value and what is allowed.
  Status ApplyOverride(const std::string& assignment);
  // Sets one key from its textual form.
  Status SetFromString(const std::string& key, const std::string& value);
  // Sets one key from a typed value (ints are accepted for float keys).
  Status Set(const std::string& key, const ConfigValue& value);

  // Typed getters. Asking for a key that is not in the schema, or with the
  // wrong type, is a programming error (checked).
  int64_t GetInt(const std::string& key) const;
  double GetFloat(const std::string& key) const;
  bool GetBool(const std::string& key) const;
  const std::string& GetString(const std::string& key) const;

  // The resolved configuration as TOML (every key, grouped in tables).
  std::string ToToml() const;
  // Writes ToToml() to `path`. IoError if it cannot.
  Status WriteToml(const std::string& path) const;

  static const std::vector<ConfigKey>& Schema();
  // Returns nullptr when `name` is not a known key.
  static const ConfigKey* FindKey(const std::string& name);
  // A table of every key with type, default and help, for --help.
  static std::string SchemaHelp();

 private:
  std::map<std::string, ConfigValue> values_;
};

// Formats a value the way TOML writes it.
std::string FormatConfigValue(const ConfigValue& value);

}  // namespace strata
