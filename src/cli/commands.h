#pragma once

#include <CLI/CLI.hpp>
#include <atomic>
#include <string>

namespace strata {

// Registers the `strata` subcommands on `app`. The handlers set the process
// exit code in *exit_code. `stop` becomes true on Ctrl-C; long commands poll
// it and end cleanly. Not thread-safe (called once from main).
void AddCommands(CLI::App& app, int* exit_code, const std::atomic<bool>* stop);

// The path of this executable (/proc/self/exe), to start child processes of
// it: cluster nodes (--processes) and the runs of an experiment.
std::string SelfExe();

}  // namespace strata
