#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/status.h"
#include "experiment/results.h"

namespace strata {

// The self-contained HTML report of an experiment or a run: one file with
// the chart library (Apache ECharts, vendored in third_party/echarts and
// compiled into the binary), the page's script and style, and the data,
// all inlined, so it opens offline and needs no source tree.
//
// The page draws: train and validation loss and accuracy curves per run with
// each cell's mean and min-max band; box plots of class counts per worker
// from each run's shard_report.json (paper 001 Fig. 7); sharding time per
// method (Fig. 8); staleness histograms; the summary tables. After drawing,
// it writes a self-check (charts, whether each drew anything, script
// errors) as JSON into <pre id="strata-report-check">, which tests read.

// What the page draws, as JSON (curves averaged over workers, bands on a
// common step grid, box statistics, timings, histograms, the summary).
nlohmann::json ReportData(const ExperimentData& data,
                          const nlohmann::json& summary);

// The page for `report_data` (from ReportData).
std::string RenderReportHtml(const nlohmann::json& report_data);

// Loads `path` (an experiment or a run directory), renders the report and
// writes it to `html_path` ("" = <path>/report.html). Returns the path
// written. NotFound when `path` is neither kind of directory; IoError when
// the file cannot be written.
Result<std::string> WriteReport(const std::string& path,
                                const std::string& html_path);

// The embedded assets (see src/experiment/CMakeLists.txt).
std::string_view EchartsJs();
std::string_view EchartsVersion();
std::string_view ReportTemplate();

}  // namespace strata
