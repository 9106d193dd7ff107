// The strata command: one binary for every role and tool.
#include <CLI/CLI.hpp>
#include <atomic>
#include <csignal>
#include <cstdio>

#include "cli/commands.h"

namespace {
// Set by the first Ctrl-C; the second one ends the process at once.
std::atomic<bool> g_stop{false};

void OnInterrupt(int) {
  if (g_stop.exchange(true)) {
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
  }
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"strata: parameter-server training of deep classifiers"};
  int exit_code = 0;
  strata::AddCommands(app, &exit_code, &g_stop);
  std::signal(SIGINT, OnInterrupt);
  std::signal(SIGTERM, OnInterrupt);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return exit_code;
}
