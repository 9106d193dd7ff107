#pragma once

#include <CLI/CLI.hpp>

namespace strata {

// Registers `strata keys generate DIR [--force]` on `app`: makes a CURVE key
// pair for a cluster and writes DIR/cluster.key (both keys, mode 0600) and
// DIR/cluster.pub (the public key), for cluster.security = "curve" with
// cluster.keys_dir = DIR (docs/design/security.md, Security). Existing files
// are kept unless --force. The handler sets *exit_code (0 written, 1 failed or
// refused to overwrite). Not thread-safe (called once from AddCommands).
void AddKeysCommand(CLI::App& app, int* exit_code);

}  // namespace strata
