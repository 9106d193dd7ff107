#pragma once

#include <CLI/CLI.hpp>
#include <atomic>

namespace strata {

// strata scale RUN_DIR --workers N: asks a running job to go on with N
// workers (docs/guide/elastic.md). Not thread-safe (called once from
// AddCommands).
void AddScaleCommand(CLI::App& app, int* exit_code,
                     const std::atomic<bool>* stop);

}  // namespace strata
