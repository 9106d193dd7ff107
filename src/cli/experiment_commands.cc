#include "cli/experiment_commands.h"

#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "common/log.h"
#include "experiment/experiment.h"
#include "experiment/report.h"

namespace strata {
void AddExperimentCommands(CLI::App& app, int* exit_code,
                           const std::atomic<bool>* stop) {
  auto opts = std::make_shared<ExperimentOptions>();
  auto no_report = std::make_shared<bool>(false);
  CLI::App* exp = app.add_subcommand(
      "experiment",
      "Run a grid of settings x repeats (each run a child `strata train`), "
      "then write summary.json, summary.csv and report.html. Run it again to "
      "resume: finished runs are kept. See docs/experiments.md.");
  exp->add_option("-c,--config", opts->spec_path, "experiment file (TOML)")
      ->required()
      ->check(CLI::ExistingFile);
  exp->add_option("-o,--output", opts->output,
                  "experiment directory (default: the file's `output`)");
  exp->add_option("--parallel", opts->parallel,
                  "runs at once (default: the file's `parallel`, else 1)")
      ->check(CLI::Range(1, 1024));
  exp->add_option("--run-timeout", opts->run_timeout_s,
                  "seconds a run may take before it is stopped (default: the "
                  "file's `run_timeout_s`, else 3600)")
      ->check(CLI::PositiveNumber);
  exp->add_flag("--dry-run", opts->dry_run,
                "print the cells and the command of every run, run nothing");
  exp->add_flag("--no-report", *no_report, "do not write report.html");
  exp->callback([=]() {
    ExperimentOptions o = *opts;
    o.exe = SelfExe();
    o.stop = stop;
    o.write_report = !*no_report;
    auto code = RunExperiment(o);
    if (!code.ok()) {
      LogError("{}", code.status().message());
      *exit_code =
          code.status().code() == Status::Code::kInvalidArgument ? 2 : 1;
      return;
    }
    *exit_code = *code;
  });

  auto path = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  CLI::App* report = app.add_subcommand(
      "report",
      "Write one self-contained HTML report (opens offline) for a run or an "
      "experiment directory: curves with spread bands, class counts per "
      "worker, sharding time, staleness, summary tables.");
  report->add_option("path", *path, "run directory or experiment directory")
      ->required()
      ->check(CLI::ExistingDirectory);
  report->add_option("-o,--output", *out,
                     "HTML file to write (default: <path>/report.html)");
  report->callback([=]() {
    auto written = WriteReport(*path, *out);
    if (!written.ok()) {
      LogError("{}", written.status().message());
      *exit_code = written.status().code() == Status::Code::kNotFound ? 2 : 1;
      return;
    }
    std::printf("report: %s\n", written->c_str());
    *exit_code = 0;
  });
}

}  // namespace strata
