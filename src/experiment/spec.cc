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

namespace {

using KeyNodes = std::vector<std::pair<std::string, const toml::node*>>;

// One FromString call: the parsed document, the file it came from, and the
// override probe that checks every base, cell and grid value in turn. Each
// Parse* method reads one part of the document into the spec, in the order
// the checks have always run (so a file with several mistakes reports the
// same one first).
class SpecParser {
 public:
  SpecParser(const toml::table& doc, const std::string& origin,
             const std::string& base_dir)
      : doc_(doc), origin_(origin), base_dir_(base_dir) {}

  Status Err(const std::string& what) const {
    return Status::InvalidArgument("experiment {}: {}", origin_, what);
  }
  // Wraps a status from a helper with the file's name.
  Status InFile(const Status& st) const {
    return st.WithContext("experiment " + origin_);
  }

  Status CheckTopKeys() const;
  Status ParseNames(ExperimentSpec* spec) const;
  // Defaults, then the base file (`config`), then [base].
  Status ParseBase(ExperimentSpec* spec) const;
  Status ParseRepeatsAndSeeds(ExperimentSpec* spec) const;
  Status ParseLimits(ExperimentSpec* spec) const;
  Result<std::vector<ExperimentCell>> ParseExplicitCells();
  // The grid: one list of value texts per key (toml++ keeps keys sorted).
  Result<std::vector<std::vector<std::string>>> ParseGrid(ExperimentSpec* spec);
  Status ParseBaseline(ExperimentSpec* spec) const;

  // Starts the probe from the spec's base: overrides are checked on it.
  void StartProbe(const Config& base) { probe_ = base; }

 private:
  Result<ExperimentCell> ParseCell(const toml::table& t, size_t i);
  // Validates one override on the probe; returns its --set text.
  Result<std::string> CheckOverride(const std::string& where,
                                    const std::string& key,
                                    const toml::node& node);

  const toml::table& doc_;
  const std::string& origin_;
  const std::string& base_dir_;
  Config probe_;
};

Status SpecParser::CheckTopKeys() const {
  static const std::set<std::string> kTopKeys = {"name",
                                                 "output",
                                                 "config",
                                                 "repeats",
                                                 "seeds",
                                                 "baseline",
                                                 "parallel",
                                                 "run_timeout_s",
                                                 "target_accuracy",
                                                 "parallel_policy",
                                                 "base",
                                                 "grid",
                                                 "cells"};
  for (const auto& [key, node] : doc_) {
    if (kTopKeys.count(std::string(key.str())) == 0) {
      return Err(fmt::format(
          "unknown entry '{}' (known: name, output, config, repeats, seeds, "
          "baseline, parallel, run_timeout_s, target_accuracy, "
          "parallel_policy, "
          "[base], [grid], [[cells]])",
          key.str()));
    }
  }
  return Status::Ok();
}

Status SpecParser::ParseNames(ExperimentSpec* spec) const {
  spec->name = doc_["name"].value_or(std::string());
  spec->output = doc_["output"].value_or(std::string());
  if (doc_.contains("name") && !doc_["name"].is_string())
    return Err("'name' must be a string");
  if (doc_.contains("output") && !doc_["output"].is_string())
    return Err("'output' must be a string");
  return Status::Ok();
}

Status SpecParser::ParseBase(ExperimentSpec* spec) const {
  if (auto path = doc_["config"].value<std::string>()) {
    std::string p = (!path->empty() && (*path)[0] == '/')
                        ? *path
                        : JoinPath(base_dir_, *path);
    auto base = Config::FromTomlFile(p);
    if (!base.ok()) return InFile(base.status());
    spec->base = *base;
  } else if (doc_.contains("config")) {
    return Err("'config' must be a path (string)");
  }
  if (!doc_.contains("base")) return Status::Ok();
  const toml::table* base = doc_["base"].as_table();
  if (base == nullptr) return Err("'base' must be a table of config keys");
  KeyNodes kv;
  Flatten(*base, "", &kv);
  for (const auto& [key, node] : kv) {
    ASSIGN_OR_RETURN(ConfigValue v, ScalarValue(*node, "experiment " + origin_ +
                                                           ": base." + key));
    Status st = spec->base.Set(key, v);
    if (!st.ok()) return st.WithContext("experiment " + origin_ + ": [base]");
  }
  return Status::Ok();
}

Status SpecParser::ParseRepeatsAndSeeds(ExperimentSpec* spec) const {
  if (doc_.contains("seeds")) {
    const toml::array* seeds = doc_["seeds"].as_array();
    if (seeds == nullptr || seeds->empty())
      return Err("'seeds' must be a non-empty list of integers");
    for (const auto& s : *seeds) {
      if (!s.is_integer()) return Err("'seeds' must hold integers only");
      spec->seeds.push_back(*s.value<int64_t>());
    }
  }
  if (doc_.contains("repeats")) {
    if (!doc_["repeats"].is_integer() || *doc_["repeats"].value<int64_t>() < 1)
      return Err("'repeats' must be an integer >= 1");
    spec->repeats = static_cast<int>(*doc_["repeats"].value<int64_t>());
    if (!spec->seeds.empty() &&
        static_cast<int>(spec->seeds.size()) != spec->repeats) {
      return Err(fmt::format("'repeats' = {} but 'seeds' has {} entries",
                             spec->repeats, spec->seeds.size()));
    }
  } else if (!spec->seeds.empty()) {
    spec->repeats = static_cast<int>(spec->seeds.size());
  }
  if (spec->seeds.empty()) {
    const int64_t s0 = spec->base.GetInt("run.seed");
    for (int r = 0; r < spec->repeats; ++r) spec->seeds.push_back(s0 + r);
  }
  return Status::Ok();
}

Status SpecParser::ParseLimits(ExperimentSpec* spec) const {
  if (doc_.contains("parallel")) {
    if (!doc_["parallel"].is_integer() ||
        *doc_["parallel"].value<int64_t>() < 1)
      return Err("'parallel' must be an integer >= 1");
    spec->parallel = static_cast<int>(*doc_["parallel"].value<int64_t>());
  }
  if (doc_.contains("run_timeout_s")) {
    auto t = doc_["run_timeout_s"].value<double>();
    if (!t || *t <= 0) return Err("'run_timeout_s' must be a number > 0");
    spec->run_timeout_s = *t;
  }
  if (doc_.contains("target_accuracy")) {
    auto t = doc_["target_accuracy"].value<double>();
    if (!t || *t <= 0 || *t > 1)
      return Err("'target_accuracy' must be a number in (0, 1]");
    spec->target_accuracy = *t;
  }
  if (doc_.contains("parallel_policy")) {
    auto p = doc_["parallel_policy"].value<std::string>();
    if (!p || (*p != "strict" && *p != "shared"))
      return Err("'parallel_policy' must be \"strict\" or \"shared\"");
    spec->parallel_shared = *p == "shared";
  }
  return Status::Ok();
}

Result<std::string> SpecParser::CheckOverride(const std::string& where,
                                              const std::string& key,
                                              const toml::node& node) {
  if (ReservedKeys().count(key)) {
    return Err(fmt::format(
        "{}: '{}' is set by the experiment for every run (use 'output' "
        "and 'seeds')",
        where, key));
  }
  ASSIGN_OR_RETURN(ConfigValue v,
                   ScalarValue(node, fmt::format("experiment {}: {} '{}'",
                                                 origin_, where, key)));
  Status st = probe_.Set(key, v);
  if (!st.ok()) return st.WithContext("experiment " + origin_ + ": " + where);
  return OverrideText(v);
}

Result<ExperimentCell> SpecParser::ParseCell(const toml::table& t, size_t i) {
  ExperimentCell cell;
  cell.name = t["name"].value_or(std::string());
  if (cell.name.empty())
    return Err(fmt::format("[[cells]] #{} has no 'name'", i + 1));
  if (Sanitize(cell.name) != cell.name) {
    return Err(fmt::format(
        "cell name '{}' may only hold letters, digits, '.', '-' and '+' "
        "(it names directories)",
        cell.name));
  }
  cell.compare_to = t["compare_to"].value_or(std::string());
  for (const auto& [key, node] : t) {
    if (key != "name" && key != "set" && key != "compare_to")
      return Err(
          fmt::format("cell '{}': unknown entry '{}' (use name, "
                      "set = {{ key = value }} and compare_to)",
                      cell.name, key.str()));
  }
  if (const toml::table* set = t["set"].as_table()) {
    KeyNodes kv;
    Flatten(*set, "", &kv);
    for (const auto& [key, node] : kv) {
      ASSIGN_OR_RETURN(std::string text,
                       CheckOverride("cell '" + cell.name + "'", key, *node));
      cell.overrides.emplace_back(key, text);
    }
  } else if (t.contains("set")) {
    return Err(fmt::format("cell '{}': 'set' must be a table", cell.name));
  }
  return cell;
}

Result<std::vector<ExperimentCell>> SpecParser::ParseExplicitCells() {
  std::vector<ExperimentCell> cells;
  if (!doc_.contains("cells")) return cells;
  const toml::array* entries = doc_["cells"].as_array();
  if (entries == nullptr) return Err("'cells' must be an array of tables");
  for (size_t i = 0; i < entries->size(); ++i) {
    const toml::table* t = (*entries)[i].as_table();
    if (t == nullptr) return Err("every [[cells]] entry must be a table");
    ASSIGN_OR_RETURN(ExperimentCell cell, ParseCell(*t, i));
    cells.push_back(std::move(cell));
  }
  return cells;
}

Result<std::vector<std::vector<std::string>>> SpecParser::ParseGrid(
    ExperimentSpec* spec) {
  std::vector<std::vector<std::string>> grid_values;
  if (!doc_.contains("grid")) return grid_values;
  const toml::table* grid = doc_["grid"].as_table();
  if (grid == nullptr) return Err("'grid' must be a table of lists");
  KeyNodes kv;
  Flatten(*grid, "", &kv);
  for (const auto& [key, node] : kv) {
    const toml::array* values = node->as_array();
    if (values == nullptr || values->empty()) {
      return Err(
          fmt::format("grid '{}' must be a non-empty list of values", key));
    }
    std::vector<std::string> texts;
    for (const auto& v : *values) {
      ASSIGN_OR_RETURN(std::string text, CheckOverride("grid", key, v));
      texts.push_back(text);
    }
    spec->grid_keys.push_back(key);
    grid_values.push_back(std::move(texts));
  }
  return grid_values;
}

Status SpecParser::ParseBaseline(ExperimentSpec* spec) const {
  if (!doc_.contains("baseline")) return Status::Ok();
  auto b = doc_["baseline"].value<std::string>();
  if (!b) return Err("'baseline' must be a string (a cell name or key=value)");
  auto index = ResolveBaseline(spec->cells, *b);
  if (!index.ok()) return InFile(index.status());
  spec->baseline = spec->cells[*index].name;
  return Status::Ok();
}

// Short labels for the grid keys: the last component, unless two share it.
std::vector<std::string> GridLabels(const std::vector<std::string>& keys) {
  std::vector<std::string> labels;
  for (const std::string& k : keys)
    labels.push_back(k.substr(k.rfind('.') + 1));
  for (size_t i = 0; i < labels.size(); ++i) {
    if (std::count(labels.begin(), labels.end(), labels[i]) > 1) {
      for (size_t j = 0; j < labels.size(); ++j) {
        if (labels[j] == labels[i] && j != i) labels[j] = Sanitize(keys[j]);
      }
      labels[i] = Sanitize(keys[i]);
    }
  }
  return labels;
}

// One grid point `p` applied to explicit cell `e`: its overrides gain the
// point's values and its name the point's suffix. The last grid key varies
// fastest. InvalidArgument (through `parser`) when the cell sets a grid key.
Result<ExperimentCell> GridPointCell(
    const SpecParser& parser, const ExperimentCell& e, size_t p,
    const std::vector<std::string>& keys,
    const std::vector<std::vector<std::string>>& grid_values,
    const std::vector<std::string>& labels) {
  ExperimentCell cell = e;
  std::string suffix;
  size_t rest = p;
  std::vector<size_t> idx(grid_values.size());
  for (size_t k = grid_values.size(); k-- > 0;) {
    idx[k] = rest % grid_values[k].size();
    rest /= grid_values[k].size();
  }
  for (size_t k = 0; k < grid_values.size(); ++k) {
    const std::string& value = grid_values[k][idx[k]];
    for (const auto& o : e.overrides) {
      if (o.first == keys[k]) {
        return parser.Err(fmt::format(
            "cell '{}' and the grid both set '{}'; set it in one place", e.name,
            o.first));
      }
    }
    cell.overrides.emplace_back(keys[k], value);
    suffix += (suffix.empty() ? "" : "_") + labels[k] + "-" + Sanitize(value);
  }
  if (!suffix.empty())
    cell.name = cell.name.empty() ? suffix : cell.name + "_" + suffix;
  if (cell.name.empty()) cell.name = "base";
  return cell;
}

// Cells = explicit cells (or one empty cell) x grid points.
Status ExpandCells(const SpecParser& parser,
                   std::vector<ExperimentCell> explicit_cells,
                   const std::vector<std::vector<std::string>>& grid_values,
                   ExperimentSpec* spec) {
  const std::vector<std::string> labels = GridLabels(spec->grid_keys);
  if (explicit_cells.empty()) explicit_cells.push_back(ExperimentCell{});
  size_t points = 1;
  for (const auto& v : grid_values) points *= v.size();
  for (const ExperimentCell& e : explicit_cells) {
    for (size_t p = 0; p < points; ++p) {
      ASSIGN_OR_RETURN(
          ExperimentCell cell,
          GridPointCell(parser, e, p, spec->grid_keys, grid_values, labels));
      spec->cells.push_back(std::move(cell));
    }
  }
  return Status::Ok();
}

// Unique names, a valid config for every whole combination (e.g. a key set
// twice), and compare_to naming a cell.
Status CheckCells(const SpecParser& parser, const ExperimentSpec& spec) {
  std::set<std::string> names;
  for (size_t i = 0; i < spec.cells.size(); ++i) {
    const ExperimentCell& c = spec.cells[i];
    if (!names.insert(c.name).second)
      return parser.Err(fmt::format("two cells are named '{}'", c.name));
    auto cfg = spec.CellConfig(static_cast<int>(i));
    if (!cfg.ok()) return parser.InFile(cfg.status());
  }
  for (const auto& c : spec.cells) {
    if (c.compare_to.empty()) continue;
    if (std::none_of(
            spec.cells.begin(), spec.cells.end(),
            [&](const ExperimentCell& o) { return o.name == c.compare_to; })) {
      return parser.Err(
          fmt::format("cell '{}': compare_to '{}' is not a cell name", c.name,
                      c.compare_to));
    }
  }
  return Status::Ok();
}

// Repeat-major: every cell's first repeat, then the second...
void PlanRuns(ExperimentSpec* spec) {
  for (int r = 0; r < spec->repeats; ++r) {
    for (size_t c = 0; c < spec->cells.size(); ++c) {
      PlannedRun run;
      run.cell = static_cast<int>(c);
      run.repeat = r + 1;
      run.seed = spec->seeds[r];
      run.name = spec->cells[c].name + "_r" + std::to_string(r + 1);
      spec->runs.push_back(std::move(run));
    }
  }
}

}  // namespace

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
  SpecParser parser(doc, origin, base_dir);
  ExperimentSpec spec;
  RETURN_IF_ERROR(parser.CheckTopKeys());
  RETURN_IF_ERROR(parser.ParseNames(&spec));
  RETURN_IF_ERROR(parser.ParseBase(&spec));
  RETURN_IF_ERROR(parser.ParseRepeatsAndSeeds(&spec));
  RETURN_IF_ERROR(parser.ParseLimits(&spec));
  parser.StartProbe(spec.base);
  ASSIGN_OR_RETURN(std::vector<ExperimentCell> explicit_cells,
                   parser.ParseExplicitCells());
  ASSIGN_OR_RETURN(auto grid_values, parser.ParseGrid(&spec));
  RETURN_IF_ERROR(
      ExpandCells(parser, std::move(explicit_cells), grid_values, &spec));
  RETURN_IF_ERROR(CheckCells(parser, spec));
  RETURN_IF_ERROR(parser.ParseBaseline(&spec));
  PlanRuns(&spec);
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

namespace strata {
namespace {

// What in `c` makes a run's result or its times depend on having the
// machine to itself; empty when nothing does.
std::vector<std::string> CellHazards(const Config& c) {
  std::vector<std::string> out;
  const std::string mode = c.GetString("cluster.mode");
  // The modes whose updates follow the workers' timing.
  static const std::set<std::string> kTimed = {"async", "ssp", "easgd",
                                               "gossip", "tree-easgd"};
  if (kTimed.count(mode) != 0)
    out.push_back("cluster.mode = " + mode +
                  " (the order of updates follows the workers' timing)");
  const int64_t k = c.GetInt("cluster.updates_per_step");
  if (mode == "sync" && k > 0 && k < c.GetInt("cluster.workers"))
    out.push_back(
        "sync with k of n (which gradients make a step follows "
        "the workers' timing)");
  if (c.GetInt("cluster.data_servers") > 0 &&
      c.GetString("data.assignment") == "dynamic")
    out.push_back(
        "dynamic data assignment (which worker gets which batch "
        "follows their timing)");
  bool net = !c.GetString("net.nodes").empty();
  for (const char* cls :
       {"", "worker_server.", "worker_worker.", "worker_data."})
    for (const char* f : {"bandwidth_bps", "latency_ms", "jitter_ms"})
      net = net || c.GetFloat(std::string("net.") + cls + f) > 0;
  if (net)
    out.push_back(
        "net.* emulated links (their delays are wall-clock time; "
        "a run sharing the cores computes slower)");
  if (!c.GetString("workers.speed").empty() ||
      c.GetFloat("workers.straggler_probability") > 0 ||
      c.GetFloat("workers.noise_sigma") > 0)
    out.push_back(
        "workers.* pacing (its pauses scale compute time measured "
        "on a machine the run shares)");
  return out;
}

}  // namespace

std::vector<std::string> ExperimentSpec::ParallelHazards() const {
  std::vector<std::string> out;
  if (target_accuracy > 0)
    out.push_back("target_accuracy: the runs are timed to it");
  for (size_t i = 0; i < cells.size(); ++i) {
    Result<Config> c = CellConfig(static_cast<int>(i));
    if (!c.ok()) continue;  // checked when the spec was parsed
    for (const std::string& h : CellHazards(*c))
      out.push_back("cell '" + cells[i].name + "': " + h);
  }
  return out;
}

}  // namespace strata
