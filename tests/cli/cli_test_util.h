#pragma once

// Shared by the CLI tests: run `strata <args>` in-process, make a scratch
// directory.
#include <stdlib.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace strata::testing {

// Runs `strata <args>` in-process and returns the exit code.
inline int RunStrata(std::vector<std::string> args) {
  CLI::App app{"strata"};
  int exit_code = -1;
  std::atomic<bool> stop{false};
  AddCommands(app, &exit_code, &stop);
  std::vector<const char*> argv = {"strata"};
  for (const auto& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), const_cast<char**>(argv.data()));
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return exit_code;
}

// A fresh directory under /tmp named after `tag`.
inline std::string CliTempDir(const std::string& tag) {
  std::string d = "/tmp/strata_" + tag + "_XXXXXX";
  return ::mkdtemp(d.data());
}

}  // namespace strata::testing
