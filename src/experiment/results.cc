#include "experiment/results.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "common/fs.h"
#include "experiment/stats.h"

namespace strata {
namespace {

nlohmann::json Num(double x) {
  return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr);
}

double Get(const nlohmann::json& j, const std::string& key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return kNaN;
  return j[key].get<double>();
}

std::string BaseName(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool IsDir(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void LoadRunState(LoadedRun* run) {
  switch (InspectRunDir(run->dir)) {
    case RunDirState::kMissing:
      run->state = "missing";
      return;
    case RunDirState::kPartial:
      run->state = "partial";
      return;
    case RunDirState::kComplete:
      break;
  }
  auto text = ReadFile(JoinPath(run->dir, "summary.json"));
  run->summary = nlohmann::json::parse(*text, nullptr, false);
  run->state = "complete";
}

// One metric of one cell: its statistics, and against the baseline's (when
// there is one) the variance ratio with two tests of equal variances and
// the repeats an F-test would need to detect the ratio seen.
nlohmann::json MetricJson(const SampleStats& s, const std::vector<double>& xs,
                          const SampleStats* base,
                          const std::vector<double>* base_xs) {
  const double ratio =
      base != nullptr ? VarianceRatio(base->variance, s.variance) : kNaN;
  nlohmann::json j = {{"n", s.n},
                      {"mean", Num(s.mean)},
                      {"ci95", Num(MeanCi95(xs))},
                      {"variance", Num(s.variance)},
                      {"min", Num(s.min)},
                      {"max", Num(s.max)},
                      {"variance_ratio", Num(ratio)}};
  if (base_xs != nullptr && base_xs != &xs) {
    j["variance_f_p"] = Num(FTestP(*base_xs, xs));
    j["variance_levene_p"] = Num(BrownForsytheP(*base_xs, xs));
    const int64_t need = RepeatsForPower80(ratio);
    j["repeats_for_power80"] =
        need > 0 ? nlohmann::json(need) : nlohmann::json(nullptr);
  }
  return j;
}

std::string Change(const CellInfo& cell, const CellInfo* ref);

// Run `i`'s row of the summary; its metrics (complete runs only) are added
// to `values`, one list per SummaryMetrics() entry.
nlohmann::json RunRow(const ExperimentData& data, size_t i,
                      const std::vector<RunOutcome>* outcomes,
                      std::vector<std::vector<double>>* values) {
  const auto& metrics = SummaryMetrics();
  const LoadedRun& r = data.runs[i];
  nlohmann::json j{{"name", r.name},     {"cell", data.cells[r.cell].name},
                   {"repeat", r.repeat}, {"seed", r.seed},
                   {"state", r.state},   {"dir", r.dir}};
  if (outcomes != nullptr && i < outcomes->size()) {
    j["outcome"] = (*outcomes)[i].state;
    j["exit_code"] = (*outcomes)[i].exit_code;
    j["log"] = (*outcomes)[i].log;
  }
  const bool use =
      r.state == "complete" || (data.single_run && r.summary.is_object());
  for (size_t m = 0; m < metrics.size(); ++m) {
    const double x = use ? Get(r.summary, metrics[m]) : kNaN;
    j[metrics[m]] = Num(x);
    if (use && std::isfinite(x)) (*values)[m].push_back(x);
  }
  return j;
}

// The paper 004-style row of cell `c`: the settings that differ from its
// reference, accuracy with its interval, training time, time to target.
// `stats` and `values` are the cell's, per SummaryMetrics() entry.
nlohmann::json Paper004Row(const ExperimentData& data, int c, int base,
                           const std::vector<SampleStats>& stats,
                           const std::vector<std::vector<double>>& values) {
  const CellInfo& cell = data.cells[c];
  const int ref =
      cell.compare_to.empty() ? base : data.CellIndex(cell.compare_to);
  const CellInfo* ref_cell = ref >= 0 ? &data.cells[ref] : nullptr;
  const SampleStats& acc = stats[3];    // final_val_acc
  const SampleStats& time = stats[5];   // train_s
  const size_t tta = stats.size() - 1;  // time_to_accuracy_s
  return {{"cell", cell.name},
          {"reference", ref_cell ? ref_cell->name : ""},
          {"change", c == ref ? "(baseline)" : Change(cell, ref_cell)},
          {"n", acc.n},
          {"accuracy_pct", Num(acc.mean * 100)},
          {"accuracy_pct_variance", Num(acc.variance * 1e4)},
          {"accuracy_pct_ci95", Num(MeanCi95(values[3]) * 100)},
          {"training_time_s", Num(time.mean)},
          {"reached_target", stats[tta].n},
          {"time_to_accuracy_s", Num(stats[tta].mean)},
          {"time_to_accuracy_s_ci95", Num(MeanCi95(values[tta]))}};
}

// With a target: the run's time to it, into its summary (null: never).
void AddTimeToAccuracy(double target, LoadedRun* run) {
  if (target <= 0 || !run->summary.is_object()) return;
  const double t = TimeToAccuracy(JoinPath(run->dir, "eval.jsonl"), target);
  run->summary["time_to_accuracy_s"] =
      std::isfinite(t) ? nlohmann::json(t) : nlohmann::json(nullptr);
}

// "key=value, key=value" of the settings where `cell` differs from `ref`.
std::string Change(const CellInfo& cell, const CellInfo* ref) {
  std::string out;
  for (const auto& [key, value] : cell.settings) {
    std::string ref_value;
    if (ref != nullptr) {
      for (const auto& [k, v] : ref->settings)
        if (k == key) ref_value = v;
    }
    if (ref != nullptr && ref_value == value) continue;
    out += (out.empty() ? "" : ", ") + key + "=" + value;
  }
  return out;
}

std::string Fixed(const nlohmann::json& x, int digits) {
  if (!x.is_number()) return "-";
  return fmt::format("{:.{}f}", x.get<double>(), digits);
}
std::string Sci(const nlohmann::json& x) {
  if (!x.is_number()) return "-";
  return fmt::format("{:.3e}", x.get<double>());
}
std::string Ratio(const nlohmann::json& x) {
  if (!x.is_number()) return "-";
  return fmt::format("{:.2f}x", x.get<double>());
}

// Renders rows as an aligned text table with a header rule.
std::string TextTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& r : rows) {
    if (width.size() < r.size()) width.resize(r.size(), 0);
    for (size_t i = 0; i < r.size(); ++i)
      width[i] = std::max(width[i], r[i].size());
  }
  std::string out;
  for (size_t n = 0; n < rows.size(); ++n) {
    std::string line;
    for (size_t i = 0; i < rows[n].size(); ++i) {
      std::string cell = rows[n][i];
      cell.resize(width[i], ' ');
      line += (i ? "  " : "") + cell;
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
    if (n == 0) {
      size_t total = 0;
      for (size_t w : width) total += w + 2;
      out += std::string(total > 2 ? total - 2 : total, '-') + "\n";
    }
  }
  return out;
}

// x * factor when x is a number, else x (null stays null).
nlohmann::json Scaled(const nlohmann::json& x, double factor) {
  return x.is_number() ? nlohmann::json(x.get<double>() * factor) : x;
}

}  // namespace

double TimeToAccuracy(const std::string& eval_jsonl, double target) {
  auto text = ReadFile(eval_jsonl);
  if (!text.ok()) return kNaN;
  std::istringstream in(*text);
  std::string line;
  double first = kNaN;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("val_acc") || !j.contains("wall_s") ||
        !j["val_acc"].is_number() || !j["wall_s"].is_number())
      continue;
    if (j["val_acc"].get<double>() < target) continue;
    const double t = j["wall_s"].get<double>();
    if (!(t >= first)) first = t;  // the earliest (lines are in order)
  }
  return first;
}

const std::vector<std::string>& SummaryMetrics() {
  static const std::vector<std::string> m = {
      "final_train_loss", "final_train_acc", "final_val_loss", "final_val_acc",
      "wall_s", "train_s", "samples_per_s",
      // Appended (indices above are used by position): communication and,
      // for decentralized modes, how far apart the workers' models ended.
      "bytes_per_worker", "final_consensus_distance",
      // With the experiment's target_accuracy: over the runs that reached it.
      "time_to_accuracy_s"};
  return m;
}

int ExperimentData::CellIndex(const std::string& n) const {
  for (size_t i = 0; i < cells.size(); ++i)
    if (cells[i].name == n) return static_cast<int>(i);
  return -1;
}

Result<nlohmann::json> PlanJson(const ExperimentSpec& spec) {
  std::vector<std::string> keys;
  for (const auto& c : spec.cells)
    for (const auto& o : c.overrides)
      if (std::find(keys.begin(), keys.end(), o.first) == keys.end())
        keys.push_back(o.first);
  nlohmann::json cells = nlohmann::json::array();
  for (size_t i = 0; i < spec.cells.size(); ++i) {
    ASSIGN_OR_RETURN(Config config, spec.CellConfig(static_cast<int>(i)));
    nlohmann::json overrides = nlohmann::json::array();
    for (const auto& o : spec.cells[i].overrides)
      overrides.push_back({o.first, o.second});
    nlohmann::json settings = nlohmann::json::array();
    for (const std::string& k : keys) {
      const ConfigKey* key = Config::FindKey(k);
      std::string v;
      switch (key->type) {
        case ConfigKey::Type::kInt:
          v = std::to_string(config.GetInt(k));
          break;
        case ConfigKey::Type::kFloat:
          v = OverrideText(config.GetFloat(k));
          break;
        case ConfigKey::Type::kBool:
          v = config.GetBool(k) ? "true" : "false";
          break;
        case ConfigKey::Type::kString:
          v = config.GetString(k);
          break;
      }
      settings.push_back({k, v});
    }
    cells.push_back({{"name", spec.cells[i].name},
                     {"overrides", overrides},
                     {"settings", settings},
                     {"compare_to", spec.cells[i].compare_to}});
  }
  nlohmann::json runs = nlohmann::json::array();
  for (const PlannedRun& r : spec.runs) {
    runs.push_back({{"name", r.name},
                    {"cell", r.cell},
                    {"repeat", r.repeat},
                    {"seed", r.seed}});
  }
  return nlohmann::json{{"name", spec.name},
                        {"source", spec.source},
                        {"baseline", spec.baseline},
                        {"repeats", spec.repeats},
                        {"target_accuracy", spec.target_accuracy},
                        {"grid_keys", spec.grid_keys},
                        {"cells", cells},
                        {"runs", runs}};
}

Result<ExperimentData> LoadExperiment(const std::string& dir) {
  const std::string path = JoinPath(dir, "plan.json");
  if (!FileExists(path))
    return Status::NotFound("'{}' has no plan.json (not an experiment)", dir);
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  nlohmann::json plan = nlohmann::json::parse(text, nullptr, false);
  if (plan.is_discarded() || !plan.is_object() || !plan["cells"].is_array() ||
      !plan["runs"].is_array())
    return Status::DataLoss("'{}' is not a valid experiment plan", path);
  ExperimentData d;
  try {
    d.name = plan.value("name", BaseName(dir));
    d.output = dir;
    d.baseline = plan.value("baseline", "");
    d.target_accuracy = plan.value("target_accuracy", 0.0);
    d.parallel = plan.value("parallel", 1);
    d.grid_keys = plan.value("grid_keys", std::vector<std::string>{});
    for (const auto& c : plan["cells"]) {
      CellInfo cell;
      cell.name = c.at("name").get<std::string>();
      for (const auto& o : c.at("overrides"))
        cell.overrides.emplace_back(o.at(0).get<std::string>(),
                                    o.at(1).get<std::string>());
      for (const auto& o : c.value("settings", nlohmann::json::array()))
        cell.settings.emplace_back(o.at(0).get<std::string>(),
                                   o.at(1).get<std::string>());
      cell.compare_to = c.value("compare_to", "");
      d.cells.push_back(std::move(cell));
    }
    for (const auto& r : plan["runs"]) {
      LoadedRun run;
      run.name = r.at("name").get<std::string>();
      run.cell = r.at("cell").get<int>();
      run.repeat = r.value("repeat", 1);
      run.seed = r.value("seed", int64_t{0});
      if (run.cell < 0 || run.cell >= static_cast<int>(d.cells.size()))
        return Status::DataLoss("'{}': run '{}' names cell {} of {}", path,
                                run.name, run.cell, d.cells.size());
      run.dir = JoinPath(JoinPath(dir, "runs"), run.name);
      LoadRunState(&run);
      AddTimeToAccuracy(d.target_accuracy, &run);
      d.runs.push_back(std::move(run));
    }
  } catch (const nlohmann::json::exception& e) {
    return Status::DataLoss("'{}' is not a valid experiment plan: {}", path,
                            e.what());
  }
  return d;
}

Result<ExperimentData> LoadRunDirectory(const std::string& dir) {
  if (!IsDir(dir)) return Status::NotFound("'{}' is not a directory", dir);
  if (!FileExists(JoinPath(dir, "summary.json")) &&
      !FileExists(JoinPath(dir, "metrics.jsonl")) &&
      !FileExists(JoinPath(dir, "config.toml")))
    return Status::NotFound(
        "'{}' is neither an experiment (plan.json) nor a run directory "
        "(summary.json, metrics.jsonl or config.toml)",
        dir);
  ExperimentData d;
  d.single_run = true;
  d.output = dir;
  d.name = BaseName(dir);
  CellInfo cell;
  cell.name = d.name;
  d.cells.push_back(cell);
  LoadedRun run;
  run.name = d.name;
  run.dir = dir;
  LoadRunState(&run);
  // A run still being written, or an interrupted one, is shown as it is.
  if (run.state == "partial") {
    auto text = ReadFile(JoinPath(dir, "summary.json"));
    if (text.ok()) {
      nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
      if (!j.is_discarded()) run.summary = j;
    }
  }
  d.runs.push_back(run);
  return d;
}

Result<ExperimentData> LoadResults(const std::string& path) {
  if (FileExists(JoinPath(path, "plan.json"))) return LoadExperiment(path);
  return LoadRunDirectory(path);
}

nlohmann::json Summarize(const ExperimentData& data,
                         const std::vector<RunOutcome>* outcomes) {
  const auto& metrics = SummaryMetrics();
  // values[cell][metric] over the cell's complete runs.
  std::vector<std::vector<std::vector<double>>> values(
      data.cells.size(), std::vector<std::vector<double>>(metrics.size()));
  std::vector<int> planned(data.cells.size(), 0);
  nlohmann::json runs = nlohmann::json::array();
  for (size_t i = 0; i < data.runs.size(); ++i) {
    planned[data.runs[i].cell] += 1;
    runs.push_back(RunRow(data, i, outcomes, &values[data.runs[i].cell]));
  }

  std::vector<std::vector<SampleStats>> stats(data.cells.size());
  for (size_t c = 0; c < data.cells.size(); ++c)
    for (size_t m = 0; m < metrics.size(); ++m)
      stats[c].push_back(Describe(values[c][m]));
  const int base = data.CellIndex(data.baseline);

  nlohmann::json cells = nlohmann::json::array();
  nlohmann::json table004 = nlohmann::json::array();
  bool complete = true;
  for (size_t c = 0; c < data.cells.size(); ++c) {
    const CellInfo& cell = data.cells[c];
    nlohmann::json overrides = nlohmann::json::object();
    for (const auto& o : cell.overrides) overrides[o.first] = o.second;
    nlohmann::json jm = nlohmann::json::object();
    int64_t n = 0;
    for (size_t m = 0; m < metrics.size(); ++m) {
      const SampleStats& s = stats[c][m];
      // time_to_accuracy_s counts the runs that reached the target only.
      if (metrics[m] != "time_to_accuracy_s") n = std::max(n, s.n);
      jm[metrics[m]] =
          MetricJson(s, values[c][m], base >= 0 ? &stats[base][m] : nullptr,
                     base >= 0 ? &values[base][m] : nullptr);
    }
    if (n < planned[c]) complete = false;
    cells.push_back({{"name", cell.name},
                     {"overrides", overrides},
                     {"runs_planned", planned[c]},
                     {"runs_complete", n},
                     {"is_baseline", static_cast<int>(c) == base},
                     {"metrics", jm}});

    table004.push_back(
        Paper004Row(data, static_cast<int>(c), base, stats[c], values[c]));
  }
  return nlohmann::json{
      {"experiment", data.name},
      {"dir", data.output},
      {"baseline", data.baseline},
      {"target_accuracy", data.target_accuracy},
      {"grid_keys", data.grid_keys},
      {"metrics", metrics},
      {"complete", complete},
      {"notes",
       {{"variance",
         "unbiased sample variance (n - 1) over a cell's complete runs"},
        {"variance_ratio",
         "baseline variance / cell variance (paper 001's 'N X less variance'); "
         "> 1: the cell varies less than the baseline"},
        {"training_time_s",
         "mean train_s (training only, without the final "
         "evaluation)"},
        {"ci95",
         "half the width of the 95% confidence interval of the mean "
         "(Student's t, n - 1 degrees of freedom)"},
        {"times", data.parallel > 1
                      ? fmt::format("{} runs ran at once and shared the "
                                    "machine: wall_s, train_s, samples_per_s "
                                    "and time_to_accuracy_s are not "
                                    "comparable with runs made alone",
                                    data.parallel)
                      : "runs ran one at a time"}}},
      {"cells", cells},
      {"paper004_table", table004},
      {"runs", runs}};
}

std::string SummaryCsv(const nlohmann::json& s) {
  std::vector<std::string> keys =
      s.value("grid_keys", std::vector<std::string>{});
  auto csv = [](const std::string& v) {
    if (v.find_first_of(",\"\n") == std::string::npos) return v;
    std::string q = "\"";
    for (char c : v) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
  };
  auto num = [](const nlohmann::json& x) {
    return x.is_number() ? fmt::format("{:.9g}", x.get<double>())
                         : std::string();
  };
  std::string out = "cell";
  for (const auto& k : keys) out += "," + csv(k);
  out += ",n";
  for (const auto& m : SummaryMetrics())
    out += "," + m + "_mean," + m + "_variance," + m + "_variance_ratio";
  out += "\n";
  for (const auto& c : s["cells"]) {
    out += csv(c["name"].get<std::string>());
    for (const auto& k : keys)
      out += "," + csv(c["overrides"].value(k, std::string()));
    out += "," + std::to_string(c["runs_complete"].get<int64_t>());
    for (const auto& m : SummaryMetrics()) {
      const auto& x = c["metrics"][m];
      out += "," + num(x["mean"]) + "," + num(x["variance"]) + "," +
             num(x["variance_ratio"]);
    }
    out += "\n";
  }
  return out;
}

namespace {

// The paper 004-style table of summary `s`, with its heading.
std::string Paper004Text(const nlohmann::json& s) {
  std::vector<std::vector<std::string>> rows;
  std::string out;
  const double target = s.value("target_accuracy", 0.0);
  rows = {
      {"cell", "change to baseline", "accuracy %", "+-95%", "training time s"}};
  if (target > 0) {
    rows[0].push_back("reached");
    rows[0].push_back(fmt::format("time to {:.3g} s", target));
    rows[0].push_back("+-95%");
  }
  for (const auto& r : s["paper004_table"]) {
    rows.push_back({r["cell"].get<std::string>(),
                    r["change"].get<std::string>(), Fixed(r["accuracy_pct"], 2),
                    Fixed(r.value("accuracy_pct_ci95", nlohmann::json()), 2),
                    Fixed(r["training_time_s"], 2)});
    if (target > 0) {
      rows.back().push_back(
          fmt::format("{}/{}", r.value("reached_target", 0), r.value("n", 0)));
      rows.back().push_back(Fixed(r["time_to_accuracy_s"], 2));
      rows.back().push_back(
          Fixed(r.value("time_to_accuracy_s_ci95", nlohmann::json()), 2));
    }
  }
  out +=
      "\nAccuracy (final validation) and training time per setting (means, "
      "95% confidence intervals";
  out += target > 0 ? "; time to the target: the evaluator's wall clock, over "
                      "the runs that reached it):\n"
                    : "):\n";
  out += TextTable(rows);
  return out;
}

}  // namespace

std::string SummaryText(const nlohmann::json& s) {
  std::string out;
  const bool has_base = !s.value("baseline", std::string()).empty();
  std::vector<std::vector<std::string>> rows = {
      {"cell", "n", "train loss", "var", "train acc", "var", "val loss", "var",
       "val acc", "var", "wall s", "samples/s", "MB/worker", "consensus"}};
  for (const auto& c : s["cells"]) {
    const auto& m = c["metrics"];
    rows.push_back({c["name"].get<std::string>() +
                        (c["is_baseline"].get<bool>() ? " *" : ""),
                    std::to_string(c["runs_complete"].get<int64_t>()),
                    Fixed(m["final_train_loss"]["mean"], 6),
                    Sci(m["final_train_loss"]["variance"]),
                    Fixed(m["final_train_acc"]["mean"], 6),
                    Sci(m["final_train_acc"]["variance"]),
                    Fixed(m["final_val_loss"]["mean"], 6),
                    Sci(m["final_val_loss"]["variance"]),
                    Fixed(m["final_val_acc"]["mean"], 6),
                    Sci(m["final_val_acc"]["variance"]),
                    Fixed(m["wall_s"]["mean"], 2),
                    Fixed(m["samples_per_s"]["mean"], 0),
                    Fixed(Scaled(m["bytes_per_worker"]["mean"], 1e-6), 1),
                    Sci(m["final_consensus_distance"]["mean"])});
  }
  out += "Final metrics per cell (mean and unbiased variance over repeats";
  out += has_base ? "; * = baseline):\n" : "):\n";
  out += TextTable(rows);
  if (has_base) {
    rows = {{"cell", "train loss", "train acc", "val loss", "val acc",
             "val acc F p", "Levene p", "n for power 0.8"}};
    for (const auto& c : s["cells"]) {
      const auto& m = c["metrics"];
      const auto& acc = m["final_val_acc"];
      rows.push_back(
          {c["name"].get<std::string>(),
           Ratio(m["final_train_loss"]["variance_ratio"]),
           Ratio(m["final_train_acc"]["variance_ratio"]),
           Ratio(m["final_val_loss"]["variance_ratio"]),
           Ratio(acc["variance_ratio"]),
           Fixed(acc.value("variance_f_p", nlohmann::json()), 4),
           Fixed(acc.value("variance_levene_p", nlohmann::json()), 4),
           Fixed(acc.value("repeats_for_power80", nlohmann::json()), 0)});
    }
    out += "\nVariance ratio against the baseline '" +
           s["baseline"].get<std::string>() +
           "' (baseline variance / cell variance; > 1 = less variance), with "
           "the p of equal variances (F-test, Brown-Forsythe/Levene) and the "
           "repeats per cell an F-test needs to detect the ratio seen with "
           "probability 0.8:\n";
    out += TextTable(rows);
  }
  out += Paper004Text(s);
  if (!s.value("complete", true))
    out += "\n(incomplete: some planned runs have not finished)\n";
  return out;
}

Status WriteSummaryFiles(const std::string& dir, const nlohmann::json& s) {
  RETURN_IF_ERROR(
      WriteFileAtomic(JoinPath(dir, "summary.json"), s.dump(2) + "\n"));
  return WriteFileAtomic(JoinPath(dir, "summary.csv"), SummaryCsv(s));
}

}  // namespace strata
