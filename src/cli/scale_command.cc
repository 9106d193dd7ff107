#include "cli/scale_command.h"

#include <memory>
#include <string>
#include <vector>

#include "common/log.h"
#include "launch/scale.h"

namespace strata {

void AddScaleCommand(CLI::App& app, int* exit_code,
                     const std::atomic<bool>* stop) {
  auto run_dir = std::make_shared<std::string>();
  auto workers = std::make_shared<int>(0);
  auto drain = std::make_shared<std::vector<int>>();
  auto timeout_s = std::make_shared<double>(120);
  CLI::App* scale = app.add_subcommand(
      "scale",
      "Ask a running job (strata train, threads or --processes, on this "
      "machine) to go on with another number of workers: it stops at a "
      "checkpoint and resumes from it on N, the rest of the epoch "
      "re-planned over them (docs/guide/elastic.md).");
  scale->add_option("run_dir", *run_dir, "the run's directory")
      ->required()
      ->check(CLI::ExistingDirectory);
  scale->add_option("--workers", *workers, "the new number of workers");
  scale->add_option("--drain", *drain,
                    "a worker to leave (its index; repeatable): it finishes "
                    "its step and leaves, and the workers after it are "
                    "renumbered (the count drops by one each)");
  scale->add_option("--timeout", *timeout_s,
                    "seconds to wait for the run to take the request, and "
                    "again for it to train on N workers");
  scale->callback([=]() {
    Result<ScaleOutcome> out = ScaleRun(
        *run_dir, *workers,
        std::chrono::milliseconds(static_cast<int64_t>(*timeout_s * 1000)),
        stop, *drain);
    if (!out.ok()) {
      LogError("{}", out.status().message());
      *exit_code = 1;
      return;
    }
    std::printf(
        "%s: from %d to %d workers at step %lld, training again %.2f s after "
        "the request\n",
        run_dir->c_str(), out->from, out->to, static_cast<long long>(out->step),
        out->since_request_s);
    *exit_code = 0;
  });
}

}  // namespace strata
