#include "experiment/serve.h"

#include <sys/stat.h>

#include <cmath>
#include <ctime>
#include <filesystem>
#include <limits>
#include <map>
#include <utility>

#include "common/fs.h"
#include "common/md5.h"
#include "experiment/report.h"

namespace strata {
namespace {

// The files of a run directory that the report reads (report.cc,
// results.cc). A change to any of them changes the page.
constexpr const char* kReportedFiles[] = {
    "summary.json",      "metrics.jsonl",      "eval.jsonl",
    "shard_report.json", "stratum_loss.jsonl", "config.toml"};

double WallSeconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

// What the directory looks like now, without parsing anything: one stat()
// per file the report reads.
struct DirScan {
  // Path, size and modification time of every such file that exists, and
  // the runs that count as stalled: equal fingerprints, equal pages.
  std::string fingerprint;
  // Run directory -> seconds since any of its files (train.log included: a
  // run that only prints is alive) was last written.
  std::map<std::string, double> idle_s;
};

void ScanRun(const std::string& run_dir, double now,
             const LiveReportOptions& options, DirScan* scan) {
  double newest = -std::numeric_limits<double>::infinity();
  bool has_summary = false;
  auto look = [&](const std::string& name, bool reported) {
    const std::string path = JoinPath(run_dir, name);
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return;
    const double mtime =
        static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec * 1e-9;
    newest = std::max(newest, mtime);
    if (!reported) return;
    if (name == "summary.json") has_summary = true;
    scan->fingerprint += fmt::format("{}:{}:{}.{};", path, st.st_size,
                                     st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
  };
  for (const char* f : kReportedFiles) look(f, true);
  look("train.log", false);
  const double idle = now - newest;  // +inf when no file exists
  scan->idle_s[run_dir] = idle;
  // The stalled state is part of the page, so a flip must count as a change
  // even though no file changed.
  if (!has_summary && idle > options.stalled_after_s)
    scan->fingerprint += "stalled:" + run_dir + ";";
}

// The same run directory paths as LoadExperiment and LoadRunDirectory build,
// so that the scan's keys match LoadedRun::dir.
DirScan Scan(const std::string& dir, const LiveReportOptions& options) {
  DirScan scan;
  const double now = WallSeconds();
  const std::string plan = JoinPath(dir, "plan.json");
  struct stat st;
  if (::stat(plan.c_str(), &st) != 0) {
    ScanRun(dir, now, options, &scan);
    return scan;
  }
  scan.fingerprint += fmt::format("{}:{}:{}.{};", plan, st.st_size,
                                  st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
  const std::string runs = JoinPath(dir, "runs");
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(runs, ec)) {
    std::error_code is_dir_ec;
    if (!entry.is_directory(is_dir_ec)) continue;
    ScanRun(JoinPath(runs, entry.path().filename().string()), now, options,
            &scan);
  }
  return scan;
}

// The run's summary.json, or null when there is none (yet) or it does not
// parse.
nlohmann::json ReadSummary(const std::string& run_dir) {
  auto text = ReadFile(JoinPath(run_dir, "summary.json"));
  if (!text.ok()) return nullptr;
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  return j.is_discarded() || !j.is_object() ? nlohmann::json(nullptr) : j;
}

HttpResponse Unavailable(const Status& status) {
  HttpResponse r;
  r.status = 503;
  r.body = status.message() + "\n";
  return r;
}

}  // namespace

std::string LiveRunState(const std::string& loaded_state,
                         const nlohmann::json& summary,
                         double seconds_since_write,
                         const LiveReportOptions& options) {
  if (loaded_state == "missing") return "pending";
  if (loaded_state == "complete") return "done";
  if (!summary.is_object())
    return seconds_since_write > options.stalled_after_s ? "stalled"
                                                         : "running";
  if (summary.contains("error")) return "failed";
  if (summary.value("interrupted", false)) return "interrupted";
  return "failed";  // a summary that InspectRunDir does not accept
}

Result<std::unique_ptr<LiveReport>> LiveReport::Open(
    const std::string& dir, const LiveReportOptions& options) {
  if (!(options.refresh_s > 0) || !std::isfinite(options.refresh_s))
    return Status::InvalidArgument(
        "the refresh period must be a positive number of seconds, not {}",
        options.refresh_s);
  // Fails now, naming the directory, rather than on the first request.
  RETURN_IF_ERROR(LoadResults(dir).status());
  return std::unique_ptr<LiveReport>(new LiveReport(dir, options));
}

Result<nlohmann::json> LiveReport::Data() {
  MutexLock lock(&mu_);
  // Scanned before loading: a file that changes in between makes the next
  // scan differ, so the page is never left behind the directory.
  DirScan scan = Scan(dir_, options_);
  if (!data_.is_null() && scan.fingerprint == fingerprint_) return data_;
  ASSIGN_OR_RETURN(ExperimentData data, LoadResults(dir_));
  nlohmann::json report = ReportData(data, Summarize(data));
  nlohmann::json counts = nlohmann::json::object();
  for (size_t i = 0; i < data.runs.size(); ++i) {
    const LoadedRun& run = data.runs[i];
    auto idle = scan.idle_s.find(run.dir);
    const double idle_s = idle == scan.idle_s.end()
                              ? std::numeric_limits<double>::infinity()
                              : idle->second;
    const std::string state = LiveRunState(
        run.state, run.state == "partial" ? ReadSummary(run.dir) : run.summary,
        idle_s, options_);
    report["runs"][i]["state"] = state;
    report["summary"]["runs"][i]["state"] = state;
    counts[state] = counts.value(state, 0) + 1;
  }
  report["live"] = {
      {"version", Md5Hex(scan.fingerprint.data(), scan.fingerprint.size())},
      {"refresh_ms", std::llround(options_.refresh_s * 1000)},
      {"states", counts}};
  fingerprint_ = std::move(scan.fingerprint);
  data_ = std::move(report);
  return data_;
}

HttpResponse LiveReport::Handle(const HttpRequest& request) {
  HttpResponse r;
  if (request.path == "/" || request.path == "/index.html") {
    auto data = Data();
    if (!data.ok()) return Unavailable(data.status());
    r.content_type = "text/html; charset=utf-8";
    r.body = RenderReportHtml(*data);
    return r;
  }
  if (request.path == "/data.json") {
    auto data = Data();
    if (!data.ok()) return Unavailable(data.status());
    r.content_type = "application/json";
    const std::string version = (*data)["live"]["version"];
    auto asked = request.query.find("version");
    if (asked != request.query.end() && asked->second == version) {
      r.body = nlohmann::json{{"unchanged", true}, {"version", version}}.dump();
    } else {
      r.body =
          data->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
    return r;
  }
  r.status = 404;
  r.body = "not found: " + request.path + " (the report is at /)\n";
  return r;
}

Result<std::unique_ptr<HttpServer>> ServeLiveReport(
    std::shared_ptr<LiveReport> report, const std::string& address) {
  return HttpServer::Start(address, [report](const HttpRequest& request) {
    return report->Handle(request);
  });
}

}  // namespace strata
