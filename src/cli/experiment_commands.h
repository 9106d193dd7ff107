#pragma once

#include <CLI/CLI.hpp>
#include <atomic>

namespace strata {

// Registers `strata experiment` and `strata report` on `app` (see
// docs/guide/experiments.md). Handlers set *exit_code; `stop` is the Ctrl-C
// flag. Not thread-safe (called once from AddCommands).
void AddExperimentCommands(CLI::App& app, int* exit_code,
                           const std::atomic<bool>* stop);

}  // namespace strata
