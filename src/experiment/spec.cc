#include "experiment/spec.h"

#include <toml++/toml.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "common/fs.h"

namespace strata {
namespace {

// Keys the runner sets for every run; an experiment may not vary them.
const std::set<std::string>& ReservedKeys() {
  static const std::set<std::string> keys = {"run.dir", "run.name", "run.seed"};
  return keys;
}

// Nested tables become dotted keys ("cluster" -> {"mode"} is "cluster.mode"),
// so both `cluster.mode = ...` and `"cluster.mode" = ...` work.
void Flatten(const toml::table& table, const std::string& prefix,
             std::vector<std::pair<std::string, const toml::node*>>* out) {
  for (const auto& [key, node] : table) {
    std::string name = prefix + std::string(key.str());
    if (const toml::table* sub = node.as_table();
        sub != nullptr && Config::FindKey(name) == nullptr) {
      Flatten(*sub, name + ".", out);
    } else {
      out->emplace_back(name, &node);
    }
  }
}

Result<ConfigValue> ScalarValue(const toml::node& node,
                                const std::string& where) {
  if (node.is_integer()) return ConfigValue(*node.value<int64_t>());
  if (auto d = node.as_floating_point()) return ConfigValue(d->get());
  if (auto b = node.as_boolean()) return ConfigValue(b->get());
  if (auto s = node.as_string()) return ConfigValue(s->get());
  return Status::InvalidArgument("{}: expected a string, number or boolean",
                                 where);
}

// Directory names: letters, digits, '.', '-', '+'; anything else becomes '-'.
std::string Sanitize(const std::string& s) {
  std::string out;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '+';
    out += ok ? c : '-';
  }
  return out;
}

std::string DirName(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::string Stem(const std::string& path) {
  size_t slash = path.rfind('/');
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  size_t dot = base.rfind('.');
  return dot == std::string::npos || dot == 0 ? base : base.substr(0, dot);
}

}  // namespace

std::string OverrideText(const ConfigValue& value) {
  if (auto s = std::get_if<std::string>(&value)) return *s;
  return FormatConfigValue(value);
}

Result<int> ResolveBaseline(const std::vector<ExperimentCell>& cells,
                            const std::string& baseline) {
  for (size_t i = 0; i < cells.size(); ++i) {
    if (cells[i].name == baseline) return static_cast<int>(i);
  }
  if (baseline.find('=') == std::string::npos) {
    std::string names;
    for (const auto& c : cells) names += (names.empty() ? "" : ", ") + c.name;
    return Status::InvalidArgument(
        "baseline '{}' is not a cell name (cells: {})", baseline, names);
  }
  std::vector<std::pair<std::string, std::string>> want;
  std::stringstream in(baseline);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      return Status::InvalidArgument(
          "baseline selector '{}': '{}' is not key=value", baseline, item);
    }
    want.emplace_back(item.substr(0, eq), item.substr(eq + 1));
  }
  std::vector<int> matches;
  for (size_t i = 0; i < cells.size(); ++i) {
    bool all = true;
    for (const auto& w : want) {
      all =
          all && std::find(cells[i].overrides.begin(), cells[i].overrides.end(),
                           w) != cells[i].overrides.end();
    }
    if (all) matches.push_back(static_cast<int>(i));
  }
  if (matches.size() != 1) {
    return Status::InvalidArgument(
        "baseline selector '{}' matches {} cells; it must match exactly one",
        baseline, matches.size());
  }
  return matches[0];
}

Result<ExperimentSpec> ExperimentSpec::FromFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  ASSIGN_OR_RETURN(ExperimentSpec spec, FromString(text, path, DirName(path)));
  spec.source = path;
  if (spec.name.empty()) spec.name = Stem(path);
  if (spec.output.empty()) spec.output = JoinPath("runs", spec.name);
  return spec;
}

Result<ExperimentSpec> ExperimentSpec::FromString(const std::string& text,
                                                  const std::string& origin,
                                                  const std::string& base_dir) {
  toml::table doc;
  try {
    doc = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    return Status::InvalidArgument("{}:{}:{}: invalid TOML: {}", origin,
                                   e.source().begin.line,
                                   e.source().begin.column, e.description());
  }
  auto err = [&](const std::string& what) {
    return Status::InvalidArgument("experiment {}: {}", origin, what);
  };
  static const std::set<std::string> kTopKeys = {
      "name",     "output",        "config", "repeats", "seeds", "baseline",
      "parallel", "run_timeout_s", "base",   "grid",    "cells"};
  for (const auto& [key, node] : doc) {
    if (kTopKeys.count(std::string(key.str())) == 0) {
      return err(fmt::format(
          "unknown entry '{}' (known: name, output, config, repeats, seeds, "
          "baseline, parallel, run_timeout_s, [base], [grid], [[cells]])",
          key.str()));
    }
  }

  ExperimentSpec spec;
  spec.name = doc["name"].value_or(std::string());
  spec.output = doc["output"].value_or(std::string());
  if (doc.contains("name") && !doc["name"].is_string())
    return err("'name' must be a string");
  if (doc.contains("output") && !doc["output"].is_string())
    return err("'output' must be a string");

  // Base: defaults, then the base file, then [base].
  if (auto path = doc["config"].value<std::string>()) {
    std::string p = (!path->empty() && (*path)[0] == '/')
                        ? *path
                        : JoinPath(base_dir, *path);
    auto base = Config::FromTomlFile(p);
    if (!base.ok()) return base.status().WithContext("experiment " + origin);
    spec.base = *base;
  } else if (doc.contains("config")) {
    return err("'config' must be a path (string)");
  }
  if (doc.contains("base")) {
    const toml::table* base = doc["base"].as_table();
    if (base == nullptr) return err("'base' must be a table of config keys");
    std::vector<std::pair<std::string, const toml::node*>> kv;
    Flatten(*base, "", &kv);
    for (const auto& [key, node] : kv) {
      ASSIGN_OR_RETURN(
          ConfigValue v,
          ScalarValue(*node, "experiment " + origin + ": base." + key));
      Status st = spec.base.Set(key, v);
      if (!st.ok()) return st.WithContext("experiment " + origin + ": [base]");
    }
  }

  // Repeats and seeds.
  if (doc.contains("seeds")) {
    const toml::array* seeds = doc["seeds"].as_array();
    if (seeds == nullptr || seeds->empty())
      return err("'seeds' must be a non-empty list of integers");
    for (const auto& s : *seeds) {
      if (!s.is_integer()) return err("'seeds' must hold integers only");
      spec.seeds.push_back(*s.value<int64_t>());
    }
  }
  if (doc.contains("repeats")) {
    if (!doc["repeats"].is_integer() || *doc["repeats"].value<int64_t>() < 1)
      return err("'repeats' must be an integer >= 1");
    spec.repeats = static_cast<int>(*doc["repeats"].value<int64_t>());
    if (!spec.seeds.empty() &&
        static_cast<int>(spec.seeds.size()) != spec.repeats) {
      return err(fmt::format("'repeats' = {} but 'seeds' has {} entries",
                             spec.repeats, spec.seeds.size()));
    }
  } else if (!spec.seeds.empty()) {
    spec.repeats = static_cast<int>(spec.seeds.size());
  }
  if (spec.seeds.empty()) {
    const int64_t s0 = spec.base.GetInt("run.seed");
    for (int r = 0; r < spec.repeats; ++r) spec.seeds.push_back(s0 + r);
  }
  if (doc.contains("parallel")) {
    if (!doc["parallel"].is_integer() || *doc["parallel"].value<int64_t>() < 1)
      return err("'parallel' must be an integer >= 1");
    spec.parallel = static_cast<int>(*doc["parallel"].value<int64_t>());
  }
  if (doc.contains("run_timeout_s")) {
    auto t = doc["run_timeout_s"].value<double>();
    if (!t || *t <= 0) return err("'run_timeout_s' must be a number > 0");
    spec.run_timeout_s = *t;
  }

  // Validates one override against a copy of the base config.
  Config probe = spec.base;
  auto check = [&](const std::string& where, const std::string& key,
                   const toml::node& node) -> Result<std::string> {
    if (ReservedKeys().count(key)) {
      return err(fmt::format(
          "{}: '{}' is set by the experiment for every run (use 'output' "
          "and 'seeds')",
          where, key));
    }
    ASSIGN_OR_RETURN(ConfigValue v,
                     ScalarValue(node, fmt::format("experiment {}: {} '{}'",
                                                   origin, where, key)));
    Status st = probe.Set(key, v);
    if (!st.ok()) return st.WithContext("experiment " + origin + ": " + where);
    return OverrideText(v);
  };

  // Explicit cells.
  std::vector<ExperimentCell> explicit_cells;
  if (doc.contains("cells")) {
    const toml::array* cells = doc["cells"].as_array();
    if (cells == nullptr) return err("'cells' must be an array of tables");
    for (size_t i = 0; i < cells->size(); ++i) {
      const toml::table* t = (*cells)[i].as_table();
      if (t == nullptr) return err("every [[cells]] entry must be a table");
      ExperimentCell cell;
      cell.name = (*t)["name"].value_or(std::string());
      if (cell.name.empty())
        return err(fmt::format("[[cells]] #{} has no 'name'", i + 1));
      if (Sanitize(cell.name) != cell.name) {
        return err(fmt::format(
            "cell name '{}' may only hold letters, digits, '.', '-' and '+' "
            "(it names directories)",
            cell.name));
      }
      cell.compare_to = (*t)["compare_to"].value_or(std::string());
      for (const auto& [key, node] : *t) {
        if (key != "name" && key != "set" && key != "compare_to")
          return err(
              fmt::format("cell '{}': unknown entry '{}' (use name, "
                          "set = {{ key = value }} and compare_to)",
                          cell.name, key.str()));
      }
      if (const toml::table* set = (*t)["set"].as_table()) {
        std::vector<std::pair<std::string, const toml::node*>> kv;
        Flatten(*set, "", &kv);
        for (const auto& [key, node] : kv) {
          ASSIGN_OR_RETURN(std::string text,
                           check("cell '" + cell.name + "'", key, *node));
          cell.overrides.emplace_back(key, text);
        }
      } else if (t->contains("set")) {
        return err(fmt::format("cell '{}': 'set' must be a table", cell.name));
      }
      explicit_cells.push_back(std::move(cell));
    }
  }

  // The grid: key -> list of values (toml++ keeps keys sorted).
  std::vector<std::vector<std::string>> grid_values;
  if (doc.contains("grid")) {
    const toml::table* grid = doc["grid"].as_table();
    if (grid == nullptr) return err("'grid' must be a table of lists");
    std::vector<std::pair<std::string, const toml::node*>> kv;
    Flatten(*grid, "", &kv);
    for (const auto& [key, node] : kv) {
      const toml::array* values = node->as_array();
      if (values == nullptr || values->empty()) {
        return err(
            fmt::format("grid '{}' must be a non-empty list of values", key));
      }
      std::vector<std::string> texts;
      for (const auto& v : *values) {
        ASSIGN_OR_RETURN(std::string text, check("grid", key, v));
        texts.push_back(text);
      }
      spec.grid_keys.push_back(key);
      grid_values.push_back(std::move(texts));
    }
  }

  // Short labels for the grid keys: the last component, unless two share it.
  std::vector<std::string> labels;
  for (const std::string& k : spec.grid_keys) {
    labels.push_back(k.substr(k.rfind('.') + 1));
  }
  for (size_t i = 0; i < labels.size(); ++i) {
    if (std::count(labels.begin(), labels.end(), labels[i]) > 1) {
      for (size_t j = 0; j < labels.size(); ++j) {
        if (labels[j] == labels[i] && j != i)
          labels[j] = Sanitize(spec.grid_keys[j]);
      }
      labels[i] = Sanitize(spec.grid_keys[i]);
    }
  }

  // Cells = explicit cells (or one empty cell) x grid points.
  if (explicit_cells.empty()) explicit_cells.push_back(ExperimentCell{});
  size_t points = 1;
  for (const auto& v : grid_values) points *= v.size();
  for (const ExperimentCell& e : explicit_cells) {
    for (size_t p = 0; p < points; ++p) {
      ExperimentCell cell = e;
      std::string suffix;
      size_t rest = p;
      // The last grid key varies fastest.
      std::vector<size_t> idx(grid_values.size());
      for (size_t k = grid_values.size(); k-- > 0;) {
        idx[k] = rest % grid_values[k].size();
        rest /= grid_values[k].size();
      }
      for (size_t k = 0; k < grid_values.size(); ++k) {
        const std::string& value = grid_values[k][idx[k]];
        for (const auto& o : e.overrides) {
          if (o.first == spec.grid_keys[k]) {
            return err(fmt::format(
                "cell '{}' and the grid both set '{}'; set it in one place",
                e.name, o.first));
          }
        }
        cell.overrides.emplace_back(spec.grid_keys[k], value);
        suffix +=
            (suffix.empty() ? "" : "_") + labels[k] + "-" + Sanitize(value);
      }
      if (!suffix.empty())
        cell.name = cell.name.empty() ? suffix : cell.name + "_" + suffix;
      if (cell.name.empty()) cell.name = "base";
      spec.cells.push_back(std::move(cell));
    }
  }
  std::set<std::string> names;
  for (const auto& c : spec.cells) {
    if (!names.insert(c.name).second)
      return err(fmt::format("two cells are named '{}'", c.name));
    // The whole combination must be valid too (e.g. a key set twice).
    auto cfg = spec.CellConfig(static_cast<int>(&c - spec.cells.data()));
    if (!cfg.ok()) return cfg.status().WithContext("experiment " + origin);
  }

  for (const auto& c : spec.cells) {
    if (c.compare_to.empty()) continue;
    if (std::none_of(
            spec.cells.begin(), spec.cells.end(),
            [&](const ExperimentCell& o) { return o.name == c.compare_to; })) {
      return err(fmt::format("cell '{}': compare_to '{}' is not a cell name",
                             c.name, c.compare_to));
    }
  }
  if (doc.contains("baseline")) {
    auto b = doc["baseline"].value<std::string>();
    if (!b)
      return err("'baseline' must be a string (a cell name or key=value)");
    auto index = ResolveBaseline(spec.cells, *b);
    if (!index.ok()) return index.status().WithContext("experiment " + origin);
    spec.baseline = spec.cells[*index].name;
  }

  for (int r = 0; r < spec.repeats; ++r) {
    for (size_t c = 0; c < spec.cells.size(); ++c) {
      PlannedRun run;
      run.cell = static_cast<int>(c);
      run.repeat = r + 1;
      run.seed = spec.seeds[r];
      run.name = spec.cells[c].name + "_r" + std::to_string(r + 1);
      spec.runs.push_back(std::move(run));
    }
  }
  return spec;
}

Result<Config> ExperimentSpec::CellConfig(int cell) const {
  Config config = base;
  for (const auto& [key, value] : cells.at(cell).overrides) {
    Status st = config.SetFromString(key, value);
    if (!st.ok()) return st.WithContext("cell '" + cells[cell].name + "'");
  }
  return config;
}

int ExperimentSpec::BaselineIndex() const {
  for (size_t i = 0; i < cells.size(); ++i) {
    if (cells[i].name == baseline) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace strata
