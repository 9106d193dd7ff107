#include "experiment/report.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <ctime>
#include <map>
#include <sstream>

#include "common/fs.h"
#include "experiment/stats.h"

namespace strata {
namespace {

constexpr int kBandPoints = 60;
// Box plots per cell (paper 001 Fig. 7 shows three runs).
constexpr int kBoxRunsPerCell = 3;
// The phases of shard_report.json's timings_s (src/sharding/report.h).
constexpr const char* kShardingPhases[] = {"load", "fingerprint", "pca",
                                           "kmeans", "assign"};

nlohmann::json Num(double x) {
  return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr);
}

double NumberOr(const nlohmann::json& j, const char* key, double fallback) {
  if (j.is_object() && j.contains(key) && j[key].is_number())
    return j[key].get<double>();
  return fallback;
}

// Reads a JSON-lines file; lines that do not parse (a line cut by a crash)
// are skipped.
std::vector<nlohmann::json> ReadJsonLines(const std::string& path) {
  std::vector<nlohmann::json> out;
  auto text = ReadFile(path);
  if (!text.ok()) return out;
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.is_object()) out.push_back(std::move(j));
  }
  return out;
}

struct Curve {
  std::vector<double> x, loss, acc;
};

// Lines of several workers at the same step are averaged into one point.
Curve CurveOf(const std::vector<nlohmann::json>& lines, const char* loss_key,
              const char* acc_key, const char* x_key = "step") {
  std::map<double, std::array<double, 3>> by_step;  // sum loss, sum acc, n
  for (const auto& j : lines) {
    const double step = NumberOr(j, x_key, kNaN);
    const double loss = NumberOr(j, loss_key, kNaN);
    const double acc = NumberOr(j, acc_key, kNaN);
    if (!std::isfinite(step) || !std::isfinite(loss) || !std::isfinite(acc))
      continue;
    auto& s = by_step[step];
    s[0] += loss;
    s[1] += acc;
    s[2] += 1;
  }
  Curve c;
  for (const auto& [step, s] : by_step) {
    c.x.push_back(step);
    c.loss.push_back(s[0] / s[2]);
    c.acc.push_back(s[1] / s[2]);
  }
  return c;
}

nlohmann::json CurveJson(const Curve& c) {
  return {{"x", c.x}, {"loss", c.loss}, {"acc", c.acc}};
}

nlohmann::json ShardJson(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return nullptr;
  nlohmann::json r = nlohmann::json::parse(*text, nullptr, false);
  if (r.is_discarded() || !r.is_object()) return nullptr;
  nlohmann::json out = {{"method", r.value("method", std::string("?"))},
                        {"num_workers", r.value("num_workers", 0)},
                        {"num_classes", r.value("num_classes", 0)},
                        {"num_examples", r.value("num_examples", 0)},
                        {"broadcast_size", r.value("broadcast_size", 0)}};
  nlohmann::json boxes = nlohmann::json::array();
  nlohmann::json counts = nlohmann::json::array();
  if (r.contains("per_worker") && r["per_worker"].is_array()) {
    for (const auto& w : r["per_worker"]) {
      std::vector<double> xs;
      if (w.contains("class_counts") && w["class_counts"].is_array())
        for (const auto& x : w["class_counts"])
          if (x.is_number()) xs.push_back(x.get<double>());
      const FiveNumbers f = Quartiles(xs);
      boxes.push_back(
          {Num(f.min), Num(f.q1), Num(f.median), Num(f.q3), Num(f.max)});
      counts.push_back(NumberOr(w, "count", 0));
    }
  }
  out["boxes"] = boxes;
  out["worker_counts"] = counts;
  if (r.contains("timings_s") && r["timings_s"].is_object()) {
    out["timings_s"] = r["timings_s"];
    // The phases in the sharding module's order, then any it adds later,
    // so that a phase the chart does not know is drawn under its own name
    // instead of disappearing into "other".
    nlohmann::json phases = nlohmann::json::array();
    for (const char* p : kShardingPhases)
      if (r["timings_s"].contains(p)) phases.push_back(p);
    for (const auto& [k, v] : r["timings_s"].items()) {
      if (k == "total" || !v.is_number()) continue;
      if (std::find(phases.begin(), phases.end(), k) == phases.end())
        phases.push_back(k);
    }
    out["timing_phases"] = phases;
  }
  if (r.contains("tv_distance") && r["tv_distance"].is_object()) {
    out["tv_max"] = Num(NumberOr(r["tv_distance"], "max", kNaN));
    out["tv_mean"] = Num(NumberOr(r["tv_distance"], "mean", kNaN));
  }
  if (r.contains("sparse_clusters") && r["sparse_clusters"].is_object())
    out["sparse_clusters"] = r["sparse_clusters"];
  return out;
}

// Mean and min-max band of a cell's runs on a common grid over the steps
// every run covers (no extrapolation).
nlohmann::json Band(const std::vector<const Curve*>& curves, bool acc) {
  double end = kNaN;
  for (const Curve* c : curves) {
    if (c->x.empty()) continue;
    end = std::isnan(end) ? c->x.back() : std::min(end, c->x.back());
  }
  nlohmann::json j = {{"x", nlohmann::json::array()},
                      {"mean", nlohmann::json::array()},
                      {"lo", nlohmann::json::array()},
                      {"hi", nlohmann::json::array()},
                      {"runs", 0}};
  std::vector<const Curve*> used;
  for (const Curve* c : curves)
    if (!c->x.empty()) used.push_back(c);
  if (used.empty() || !std::isfinite(end)) return j;
  j["runs"] = used.size();
  double start = used[0]->x.front();
  for (const Curve* c : used) start = std::max(start, c->x.front());
  if (end < start) end = start;
  const int points = end > start ? kBandPoints : 1;
  for (int p = 0; p < points; ++p) {
    const double x =
        points == 1 ? start : start + (end - start) * p / (points - 1);
    std::vector<double> ys;
    for (const Curve* c : used)
      ys.push_back(Interpolate(c->x, acc ? c->acc : c->loss, x));
    const SampleStats s = Describe(ys);
    j["x"].push_back(x);
    j["mean"].push_back(Num(s.mean));
    j["lo"].push_back(Num(s.min));
    j["hi"].push_back(Num(s.max));
  }
  return j;
}

std::string Now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

void ReplaceOnce(std::string* s, const std::string& from,
                 const std::string& to) {
  size_t pos = s->find(from);
  if (pos != std::string::npos) s->replace(pos, from.size(), to);
}

// Text that goes inside a <script> element must not contain "</" (it could
// close the element); JSON may write "<\/" instead.
std::string ScriptSafe(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    out += s[i];
    if (s[i] == '<' && i + 1 < s.size() && s[i + 1] == '/') out += '\\';
  }
  return out;
}

// The loss-aware sampler's running loss per stratum over the run
// (stratum_loss.jsonl, data server 0), at most 200 points; null without it.
nlohmann::json StratumLossJson(const std::string& path) {
  std::vector<nlohmann::json> lines;
  for (auto& l : ReadJsonLines(path))
    if (l.value("data_server", 0) == 0 && l.contains("loss"))
      lines.push_back(l);
  if (lines.empty()) return nullptr;
  const size_t step = (lines.size() + 199) / 200;
  nlohmann::json acked = nlohmann::json::array();
  std::vector<nlohmann::json> series;
  const nlohmann::json& first = lines.front();
  if (!first["loss"].is_array() || !first.contains("class")) return nullptr;
  const size_t k = first["loss"].size();
  for (size_t s = 0; s < k; ++s) {
    series.push_back(
        {{"name", fmt::format("class {} / cluster {}", first["class"][s].dump(),
                              first["cluster"][s].dump())},
         {"loss", nlohmann::json::array()}});
  }
  for (size_t i = 0; i < lines.size(); i += step) {
    const nlohmann::json& l = lines[i];
    if (!l["loss"].is_array() || l["loss"].size() != k) continue;
    acked.push_back(l.value("acked", int64_t{0}));
    for (size_t s = 0; s < k; ++s) series[s]["loss"].push_back(l["loss"][s]);
  }
  return {{"acked", acked}, {"series", series}};
}

// A run's staleness histogram from its summary: {"x": [...], "count": [...]}.
nlohmann::json StalenessJson(const nlohmann::json& summary) {
  nlohmann::json hist = nlohmann::json::object();
  if (summary.is_object() && summary.contains("staleness_histogram") &&
      summary["staleness_histogram"].is_object())
    hist = summary["staleness_histogram"];
  std::map<int64_t, double> h;
  for (const auto& [k, v] : hist.items()) {
    char* end = nullptr;
    const long long s = std::strtoll(k.c_str(), &end, 10);
    if (end != k.c_str() && v.is_number()) h[s] += v.get<double>();
  }
  nlohmann::json sx = nlohmann::json::array(), sc = nlohmann::json::array();
  for (const auto& [s, n] : h) {
    sx.push_back(s);
    sc.push_back(n);
  }
  return {{"x", sx}, {"count", sc}};
}

// A run's data service figures from its summary; null without the service.
nlohmann::json DataServiceJson(const nlohmann::json& summary) {
  if (!summary.is_object() || !summary.contains("data_service") ||
      !summary["data_service"].is_object())
    return nullptr;
  const nlohmann::json& d = summary["data_service"];
  double batches_per_s = 0;
  if (d.contains("data_servers") && d["data_servers"].is_array())
    for (const auto& ds : d["data_servers"])
      batches_per_s += ds.value("batches_per_s", 0.0);
  return {{"wait_fraction", d.value("data_wait_fraction", 0.0)},
          {"batches_per_s", batches_per_s}};
}

// Each cell's name and overrides.
nlohmann::json CellsJson(const ExperimentData& data) {
  nlohmann::json cells = nlohmann::json::array();
  for (const CellInfo& c : data.cells) {
    nlohmann::json o = nlohmann::json::object();
    for (const auto& kv : c.overrides) o[kv.first] = kv.second;
    cells.push_back({{"name", c.name}, {"overrides", o}});
  }
  return cells;
}

}  // namespace

// The run's changes of worker count (summary.json "membership": each
// resume on another count), marked on its curves: step, from, to.
nlohmann::json MembershipJson(const nlohmann::json& summary) {
  nlohmann::json out = nlohmann::json::array();
  if (!summary.is_object() || !summary.contains("membership") ||
      !summary["membership"].is_array())
    return out;
  for (const auto& m : summary["membership"]) {
    if (!m.is_object() || m.value("event", "") != "resumed") continue;
    out.push_back({{"step", m.value("step", int64_t{0})},
                   {"from", m.value("from", 0)},
                   {"to", m.value("to", 0)}});
  }
  return out;
}

nlohmann::json ReportData(const ExperimentData& data,
                          const nlohmann::json& summary) {
  const nlohmann::json cells = CellsJson(data);
  std::vector<Curve> train(data.runs.size()), val(data.runs.size()),
      val_wall(data.runs.size());
  nlohmann::json runs = nlohmann::json::array();
  for (size_t i = 0; i < data.runs.size(); ++i) {
    const LoadedRun& r = data.runs[i];
    nlohmann::json j = {{"name", r.name},
                        {"cell", r.cell},
                        {"repeat", r.repeat},
                        {"seed", r.seed},
                        {"state", r.state}};
    if (r.state != "missing") {
      train[i] = CurveOf(ReadJsonLines(JoinPath(r.dir, "metrics.jsonl")),
                         "train_loss", "train_acc");
      const auto evals = ReadJsonLines(JoinPath(r.dir, "eval.jsonl"));
      val[i] = CurveOf(evals, "val_loss", "val_acc");
      val_wall[i] = CurveOf(evals, "val_loss", "val_acc", "wall_s");
    }
    j["train"] = CurveJson(train[i]);
    j["val"] = CurveJson(val[i]);
    j["val_wall"] = CurveJson(val_wall[i]);
    j["staleness"] = StalenessJson(r.summary);
    j["membership"] = MembershipJson(r.summary);
    j["data_service"] = DataServiceJson(r.summary);
    j["stratum_loss"] =
        r.state == "missing"
            ? nlohmann::json(nullptr)
            : StratumLossJson(JoinPath(r.dir, "stratum_loss.jsonl"));
    j["shard"] = r.state == "missing"
                     ? nlohmann::json(nullptr)
                     : ShardJson(JoinPath(r.dir, "shard_report.json"));
    runs.push_back(j);
  }

  // Union of the runs' sharding phases, first-seen order.
  nlohmann::json sharding_phases = nlohmann::json::array();
  for (const auto& j : runs) {
    if (!j["shard"].is_object() || !j["shard"].contains("timing_phases"))
      continue;
    for (const auto& p : j["shard"]["timing_phases"])
      if (std::find(sharding_phases.begin(), sharding_phases.end(), p) ==
          sharding_phases.end())
        sharding_phases.push_back(p);
  }

  nlohmann::json bands = nlohmann::json::array();
  for (size_t c = 0; c < data.cells.size(); ++c) {
    std::vector<const Curve*> t, v, w;
    for (size_t i = 0; i < data.runs.size(); ++i) {
      if (data.runs[i].cell != static_cast<int>(c)) continue;
      t.push_back(&train[i]);
      v.push_back(&val[i]);
      w.push_back(&val_wall[i]);
    }
    bands.push_back({{"cell", c},
                     {"train_loss", Band(t, false)},
                     {"train_acc", Band(t, true)},
                     {"val_loss", Band(v, false)},
                     {"val_acc", Band(v, true)},
                     {"val_acc_wall", Band(w, true)}});
  }
  return {{"title", data.single_run ? "strata run " + data.name
                                    : "strata experiment " + data.name},
          {"kind", data.single_run ? "run" : "experiment"},
          {"path", data.output},
          {"generated", Now()},
          {"echarts_version", std::string(EchartsVersion())},
          {"baseline", data.baseline},
          {"target_accuracy", data.target_accuracy},
          {"box_runs_per_cell", kBoxRunsPerCell},
          {"sharding_phases", sharding_phases},
          {"cells", cells},
          {"runs", runs},
          {"bands", bands},
          {"summary", summary}};
}

std::string RenderReportHtml(const nlohmann::json& report_data) {
  std::string html(ReportTemplate());
  const std::string title = report_data.value("title", std::string("strata"));
  std::string escaped;
  for (char c : title) {
    if (c == '<')
      escaped += "&lt;";
    else if (c == '>')
      escaped += "&gt;";
    else if (c == '&')
      escaped += "&amp;";
    else
      escaped += c;
  }
  ReplaceOnce(&html, "@STRATA_TITLE@", escaped);
  // The data and the library go last: their text may contain the markers.
  const std::string data = ScriptSafe(report_data.dump());
  const size_t data_pos = html.find("@STRATA_DATA@");
  const size_t lib_pos = html.find("@STRATA_ECHARTS@");
  if (data_pos == std::string::npos || lib_pos == std::string::npos)
    return html;  // a broken template; the browser test would say so
  if (data_pos > lib_pos) {
    html.replace(data_pos, 13, data);
    html.replace(lib_pos, 16, std::string(EchartsJs()));
  } else {
    html.replace(lib_pos, 16, std::string(EchartsJs()));
    html.replace(data_pos, 13, data);
  }
  return html;
}

Result<std::string> WriteReport(const std::string& path,
                                const std::string& html_path) {
  ASSIGN_OR_RETURN(ExperimentData data, LoadResults(path));
  const nlohmann::json summary = Summarize(data);
  const std::string out =
      html_path.empty() ? JoinPath(path, "report.html") : html_path;
  RETURN_IF_ERROR(
      WriteFileAtomic(out, RenderReportHtml(ReportData(data, summary))));
  return out;
}

}  // namespace strata
