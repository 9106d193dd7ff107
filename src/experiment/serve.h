#pragma once

// The live report behind `strata serve`: the same page as report.html, served
// over HTTP from a run or experiment directory's current state, and kept
// current by the page itself (it polls /data.json and redraws when the data
// changed). The offline report.html (WriteReport) has no live part.

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "common/mutex.h"
#include "common/status.h"
#include "experiment/results.h"
#include "metrics/http_server.h"

namespace strata {

struct LiveReportOptions {
  // How often the page asks for new data.
  double refresh_s = 2;
  // A run without summary.json none of whose files changed for this long is
  // shown as "stalled" instead of "running" (its process may be gone).
  double stalled_after_s = 300;
};

// A run's state as the live page shows it, from its LoadedRun::state
// ("missing", "partial", "complete"), its summary.json (null when there is
// none yet or it does not parse) and the seconds since any of its files was
// written: "pending" (no directory yet), "running" (no summary yet),
// "stalled" (no summary and nothing written for
// LiveReportOptions::stalled_after_s), "done" (a complete summary),
// "interrupted" (stopped by Ctrl-C or a timeout), "failed" (the summary
// names an error, or is not one a finished run writes). Pure.
std::string LiveRunState(const std::string& loaded_state,
                         const nlohmann::json& summary,
                         double seconds_since_write,
                         const LiveReportOptions& options);

// Answers the live page's requests for one directory:
//   GET /           the report page (RenderReportHtml) with the data now,
//                   its "live" key set, which turns the page's polling on;
//   GET /data.json  the data now (ReportData plus "live": version,
//                   refresh_ms, state counts); with ?version=V equal to the
//                   current version, only {"unchanged": true, "version": V};
//   anything else   404.
// The directory is read again only when one of the files the report reads
// changed size or time (or a run's stalled state flipped); otherwise the
// last data is reused.
//
// Thread-safe: Handle() and Data() may be called from several threads at
// once (a mutex serialises reading the directory).
class LiveReport {
 public:
  // NotFound naming `dir` when it is neither an experiment directory
  // (plan.json) nor a run directory; InvalidArgument for a refresh period
  // that is not positive.
  static Result<std::unique_ptr<LiveReport>> Open(
      const std::string& dir, const LiveReportOptions& options = {});

  LiveReport(const LiveReport&) = delete;
  LiveReport& operator=(const LiveReport&) = delete;

  // Never fails: a directory that cannot be read right now (plan.json being
  // rewritten, removed) is answered with 503 and the reason.
  HttpResponse Handle(const HttpRequest& request) EXCLUDES(mu_);

  // The report data now, with "live". The errors of LoadResults.
  Result<nlohmann::json> Data() EXCLUDES(mu_);

  const std::string& dir() const { return dir_; }

 private:
  LiveReport(std::string dir, LiveReportOptions options)
      : dir_(std::move(dir)), options_(options) {}

  const std::string dir_;
  const LiveReportOptions options_;
  Mutex mu_;
  std::string fingerprint_ GUARDED_BY(mu_);  // of the files behind data_
  nlohmann::json data_ GUARDED_BY(mu_);
};

// Serves `report` at `address` ("host:port"; port 0 picks a free one) from
// the server's threads until it is stopped or destroyed. The errors of
// HttpServer::Start (InvalidArgument for a malformed address, Unavailable
// naming it when it cannot be bound, e.g. in use).
Result<std::unique_ptr<HttpServer>> ServeLiveReport(
    std::shared_ptr<LiveReport> report, const std::string& address);

}  // namespace strata
