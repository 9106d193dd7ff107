#pragma once

#include <CLI/CLI.hpp>

namespace strata {

// Registers `strata shard` on `app`: loads the dataset a run config names,
// computes a shard plan (docs/design/sharding.md), writes the plan file and the
// report JSON, and prints the report table. The handler sets *exit_code
// (0 ok, 1 failure, 2 bad configuration). Not thread-safe (called once
// from AddCommands).
void AddShardCommand(CLI::App& app, int* exit_code);

}  // namespace strata
