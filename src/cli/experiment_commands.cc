#include "cli/experiment_commands.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "cli/commands.h"
#include "common/log.h"
#include "experiment/experiment.h"
#include "experiment/report.h"
#include "experiment/serve.h"

namespace strata {
namespace {

// strata experiment: a grid of settings x repeats.
void AddExperimentCommand(CLI::App& app, int* exit_code,
                          const std::atomic<bool>* stop) {
  auto opts = std::make_shared<ExperimentOptions>();
  auto no_report = std::make_shared<bool>(false);
  CLI::App* exp = app.add_subcommand(
      "experiment",
      "Run a grid of settings x repeats (each run a child `strata train`), "
      "then write summary.json, summary.csv and report.html. Run it again to "
      "resume: finished runs are kept. See docs/guide/experiments.md.");
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
}

// strata report: one offline HTML report.
void AddReportCommand(CLI::App& app, int* exit_code) {
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

// strata serve: the live report, until Ctrl-C.
void AddServeCommand(CLI::App& app, int* exit_code,
                     const std::atomic<bool>* stop) {
  auto serve_dir = std::make_shared<std::string>();
  auto address = std::make_shared<std::string>("127.0.0.1:8050");
  auto live = std::make_shared<LiveReportOptions>();
  CLI::App* serve = app.add_subcommand(
      "serve",
      "Serve the report of a run or an experiment directory on a local web "
      "page that keeps itself current while the runs go on (curves grow, the "
      "run table says which runs are running or done). Ctrl-C stops it.");
  serve->add_option("dir", *serve_dir, "run directory or experiment directory")
      ->required();
  serve->add_option("--address", *address,
                    "host:port to listen on (port 0 = any free port)");
  serve
      ->add_option("--refresh-s", live->refresh_s,
                   "seconds between the page's checks for new data")
      ->check(CLI::PositiveNumber);
  serve->callback([=]() {
    auto report = LiveReport::Open(*serve_dir, *live);
    if (!report.ok()) {
      LogError("strata serve: {}", report.status().message());
      *exit_code = report.status().code() == Status::Code::kNotFound ? 2 : 1;
      return;
    }
    auto server = ServeLiveReport(std::move(*report), *address);
    if (!server.ok()) {
      LogError("strata serve: {}", server.status().message());
      *exit_code =
          server.status().code() == Status::Code::kInvalidArgument ? 2 : 1;
      return;
    }
    std::printf("serving %s at %s (Ctrl-C to stop)\n", serve_dir->c_str(),
                (*server)->url().c_str());
    std::fflush(stdout);
    // The server answers from its own threads; this one only waits for
    // Ctrl-C or SIGTERM (main turns both into *stop).
    while (stop == nullptr || !stop->load())
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    (*server)->Stop();
    *exit_code = 0;
  });
}

}  // namespace

void AddExperimentCommands(CLI::App& app, int* exit_code,
                           const std::atomic<bool>* stop) {
  AddExperimentCommand(app, exit_code, stop);
  AddReportCommand(app, exit_code);
  AddServeCommand(app, exit_code, stop);
}

}  // namespace strata
