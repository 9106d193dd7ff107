#include "experiment/experiment.h"

#include <cstdio>

#include "common/fs.h"
#include "common/log.h"
#include "experiment/report.h"
#include "experiment/results.h"
#include "experiment/runner.h"
#include "experiment/spec.h"

namespace strata {
namespace {

std::string ShellQuote(const std::string& s) {
  if (!s.empty() &&
      s.find_first_of(" '\"\\$`!*?;&|<>(){}[]#~") == std::string::npos)
    return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// --dry-run: the cells and each run's command line.
void PrintDryRun(const ExperimentSpec& spec, const RunnerOptions& ro) {
  for (const auto& c : spec.cells) {
    std::string o;
    for (const auto& kv : c.overrides)
      o += (o.empty() ? "" : ", ") + kv.first + "=" + kv.second;
    std::printf("  cell %s%s: %s\n", c.name.c_str(),
                c.name == spec.baseline ? " (baseline)" : "",
                o.empty() ? "(base config)" : o.c_str());
  }
  for (const auto& r : spec.runs) {
    std::string cmd;
    for (const auto& a : RunCommand(spec, r, ro))
      cmd += (cmd.empty() ? "" : " ") + ShellQuote(a);
    std::printf("  %s\n", cmd.c_str());
  }
}

// Runs at once only where that changes nothing they report, unless the
// experiment accepts it (parallel_policy = "shared").
Status CheckParallel(const ExperimentSpec& spec, int parallel) {
  const std::vector<std::string> hazards = spec.ParallelHazards();
  if (hazards.empty()) return Status::Ok();
  std::string why;
  for (size_t i = 0; i < hazards.size() && i < 4; ++i)
    why += "\n  " + hazards[i];
  if (hazards.size() > 4)
    why += fmt::format("\n  ... and {} more", hazards.size() - 4);
  if (!spec.parallel_shared) {
    return Status::FailedPrecondition(
        "experiment '{}': {} runs at once would change what they measure:{}\n"
        "Run them one at a time (parallel = 1, --parallel 1), or set "
        "parallel_policy = \"shared\" in the experiment file to accept that "
        "their times (and timing-dependent results) differ from runs made "
        "alone (docs/guide/experiments.md, \"Runs at once\")",
        spec.name, parallel, why);
  }
  LogWarning(
      "experiment '{}': {} runs at once with parallel_policy = \"shared\"; "
      "their times are not comparable with runs made alone:{}",
      spec.name, parallel, why);
  return Status::Ok();
}

}  // namespace

Result<int> RunExperiment(const ExperimentOptions& options) {
  ASSIGN_OR_RETURN(ExperimentSpec spec,
                   ExperimentSpec::FromFile(options.spec_path));
  if (!options.output.empty()) spec.output = options.output;
  RunnerOptions ro;
  ro.exe = options.exe;
  ro.output = spec.output;
  ro.base_config = JoinPath(spec.output, "base.toml");
  ro.parallel = options.parallel > 0 ? options.parallel : spec.parallel;
  ro.run_timeout_s =
      options.run_timeout_s > 0 ? options.run_timeout_s : spec.run_timeout_s;
  ro.stop = options.stop;
  if (ro.parallel > 1) RETURN_IF_ERROR(CheckParallel(spec, ro.parallel));

  std::printf(
      "experiment '%s': %zu cell(s) x %d repeat(s) = %zu run(s) in %s "
      "(parallel %d, run timeout %s)\n",
      spec.name.c_str(), spec.cells.size(), spec.repeats, spec.runs.size(),
      spec.output.c_str(), ro.parallel,
      FormatDuration(ro.run_timeout_s).c_str());
  if (options.dry_run) {
    PrintDryRun(spec, ro);
    return 0;
  }

  RETURN_IF_ERROR(MakeDirs(spec.output));
  ASSIGN_OR_RETURN(std::string source, ReadFile(options.spec_path));
  RETURN_IF_ERROR(
      WriteFileAtomic(JoinPath(spec.output, "experiment.toml"), source));
  RETURN_IF_ERROR(spec.base.WriteToml(ro.base_config));
  ASSIGN_OR_RETURN(nlohmann::json plan, PlanJson(spec));
  plan["parallel"] = ro.parallel;  // the summary says when runs shared
  RETURN_IF_ERROR(
      WriteFileAtomic(JoinPath(spec.output, "plan.json"), plan.dump(2) + "\n"));

  ASSIGN_OR_RETURN(std::vector<RunOutcome> outcomes, RunPlannedRuns(spec, ro));

  ASSIGN_OR_RETURN(ExperimentData data, LoadExperiment(spec.output));
  const nlohmann::json summary = Summarize(data, &outcomes);
  RETURN_IF_ERROR(WriteSummaryFiles(spec.output, summary));
  std::printf("\n%s\n", SummaryText(summary).c_str());
  std::printf("summary: %s, %s\n",
              JoinPath(spec.output, "summary.json").c_str(),
              JoinPath(spec.output, "summary.csv").c_str());
  if (options.write_report) {
    auto html = WriteReport(spec.output, "");
    if (html.ok())
      std::printf("report: %s\n", html->c_str());
    else
      LogError("report: {}", html.status().message());
  }

  bool interrupted = false, failed = false;
  for (const auto& o : outcomes) {
    interrupted =
        interrupted || o.state == "interrupted" || o.state == "pending";
    failed = failed || o.state == "failed" || o.state == "timeout";
  }
  if (options.stop != nullptr && options.stop->load()) interrupted = true;
  if (interrupted) {
    std::printf(
        "interrupted: run the same command again to resume; finished "
        "runs are kept\n");
    return 130;
  }
  if (failed) {
    std::printf(
        "some runs failed (see the logs above); run the same command "
        "again to retry them\n");
    return 1;
  }
  return 0;
}

}  // namespace strata
