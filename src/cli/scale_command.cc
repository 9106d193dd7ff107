#include "cli/scale_command.h"

#include <memory>
#include <string>
#include <vector>

#include "common/log.h"
#include "launch/control_endpoint.h"
#include "launch/scale.h"

namespace strata {
namespace {

struct ScaleArgs {
  std::string run_dir;
  std::string control;   // tcp://HOST:PORT of cluster.control_address
  std::string keys_dir;  // the cluster key pair, for a secured run
  int workers = 0;
  std::vector<int> drain;
  int data_servers = 0;
  double timeout_s = 120;
};

// The exit code of `strata scale`.
int RunScale(const ScaleArgs& a, const std::atomic<bool>* stop) {
  if (a.run_dir.empty() == a.control.empty()) {
    LogError(
        "say which run: its directory (on this machine) or --control "
        "tcp://HOST:PORT (its cluster.control_address), not both");
    return 2;
  }
  const auto timeout =
      std::chrono::milliseconds(static_cast<int64_t>(a.timeout_s * 1000));
  Result<ScaleOutcome> out =
      a.control.empty() ? ScaleRun(a.run_dir, a.workers, timeout, stop, a.drain,
                                   a.data_servers)
                        : ScaleRemote(a.control, a.keys_dir, a.workers, a.drain,
                                      timeout, a.data_servers);
  if (!out.ok()) {
    LogError("{}", out.status().message());
    return 1;
  }
  std::printf(
      "%s: from %d to %d workers at step %lld, training again %.2f s after "
      "the request\n",
      (a.control.empty() ? a.run_dir : a.control).c_str(), out->from, out->to,
      static_cast<long long>(out->step), out->since_request_s);
  return 0;
}

}  // namespace

void AddScaleCommand(CLI::App& app, int* exit_code,
                     const std::atomic<bool>* stop) {
  auto args = std::make_shared<ScaleArgs>();
  CLI::App* scale = app.add_subcommand(
      "scale",
      "Ask a running job (strata train, threads or --processes) to go on "
      "with another number of workers: it stops at a checkpoint and resumes "
      "from it on N, the rest of the epoch re-planned over them "
      "(docs/guide/elastic.md).");
  scale
      ->add_option("run_dir", args->run_dir,
                   "the run's directory, on this machine")
      ->check(CLI::ExistingDirectory);
  scale->add_option("--control", args->control,
                    "instead of the directory: the run's control endpoint "
                    "(cluster.control_address), tcp://HOST:PORT");
  scale->add_option("--keys-dir", args->keys_dir,
                    "with --control to a run under cluster.security = "
                    "\"curve\": the directory holding the cluster key pair "
                    "(its cluster.keys_dir)");
  scale->add_option("--workers", args->workers, "the new number of workers");
  scale->add_option("--data-servers", args->data_servers,
                    "the new number of data servers of a run fed by the "
                    "data service (with or without --workers; under "
                    "dynamic assignment a run counted in epochs)");
  scale->add_option("--drain", args->drain,
                    "a worker to leave (its index; repeatable): it finishes "
                    "its step and leaves, and the workers after it are "
                    "renumbered (the count drops by one each)");
  scale->add_option("--timeout", args->timeout_s,
                    "seconds to wait for the run to take the request, and "
                    "again for it to train on N workers");
  scale->callback([=]() { *exit_code = RunScale(*args, stop); });
}

}  // namespace strata
